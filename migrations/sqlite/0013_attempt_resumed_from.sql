-- The checkpoint folder an attempt's worker resumed from (HPTUNE_RESUME_FROM), NULL for an
-- attempt that started afresh. A trial's learning curve joins a resumed attempt's
-- measurements to the earlier attempts' below the first step it reported.

ALTER TABLE attempts ADD COLUMN resumed_from TEXT;
