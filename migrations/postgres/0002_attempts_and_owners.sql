-- As migrations/sqlite/0002_attempts_and_owners.sql, in PostgreSQL's types.

ALTER TABLE trials ADD COLUMN attempt BIGINT NOT NULL DEFAULT 1;
ALTER TABLE trials ADD COLUMN owner TEXT;

ALTER TABLE measurements ADD COLUMN attempt BIGINT NOT NULL DEFAULT 1;

CREATE TABLE attempts (
    id          BIGSERIAL PRIMARY KEY,
    trial_id    BIGINT NOT NULL REFERENCES trials (id) ON DELETE CASCADE,
    attempt     BIGINT NOT NULL,
    worker      TEXT,
    owner       TEXT,
    started_at  TEXT NOT NULL,
    finished_at TEXT,
    outcome     TEXT,
    error       TEXT,
    UNIQUE (trial_id, attempt)
);
