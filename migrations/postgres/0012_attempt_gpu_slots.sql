-- As migrations/sqlite/0012_attempt_gpu_slots.sql, in PostgreSQL's types.

ALTER TABLE trials ADD COLUMN gpu_slot BIGINT;
ALTER TABLE attempts ADD COLUMN gpu_slot BIGINT;
