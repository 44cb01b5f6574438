-- As migrations/sqlite/0013_attempt_resumed_from.sql: the checkpoint folder an attempt's
-- worker resumed from (HPTUNE_RESUME_FROM), NULL for an attempt that started afresh.

ALTER TABLE attempts ADD COLUMN resumed_from TEXT;
