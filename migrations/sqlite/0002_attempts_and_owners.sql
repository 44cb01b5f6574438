-- Reliability: which controller runs a trial, and every attempt of a trial.
-- A trial keeps its number across attempts; a retry after an infrastructure failure (a worker
-- killed from outside, a controller that died with it) is a new attempt of the same trial.

ALTER TABLE trials ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;
ALTER TABLE trials ADD COLUMN owner TEXT;            -- the controller running it: host:pid:start

ALTER TABLE measurements ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;

CREATE TABLE attempts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    trial_id    INTEGER NOT NULL REFERENCES trials (id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    worker      TEXT,
    owner       TEXT,
    started_at  TEXT NOT NULL,
    finished_at TEXT,
    outcome     TEXT,                -- succeeded | failed | stopped | retried
    error       TEXT,
    UNIQUE (trial_id, attempt)
);
