-- The storage model of DESIGN.md: studies, their trials, and the trials' measurements.
-- Times are UTC RFC 3339 text with milliseconds, so they sort as they compare.

CREATE TABLE studies (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL UNIQUE,
    metric      TEXT NOT NULL,
    goal        TEXT NOT NULL CHECK (goal IN ('maximize', 'minimize')),
    spec        TEXT NOT NULL,          -- the study file as last run
    space       TEXT NOT NULL,          -- the search space as JSON, to refuse a changed one
    created_at  TEXT NOT NULL
);

CREATE TABLE trials (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    study_id     INTEGER NOT NULL REFERENCES studies (id) ON DELETE CASCADE,
    number       INTEGER NOT NULL,      -- 0, 1, 2 ... within the study
    state        TEXT NOT NULL CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'stopped')),
    params       TEXT NOT NULL,         -- JSON object, inactive parameters absent
    value        REAL,                  -- final value of the objective
    error        TEXT,                  -- why it failed or was stopped
    worker       TEXT,                  -- handle of the worker: local pid, or a job id
    log_path     TEXT,
    created_at   TEXT NOT NULL,
    started_at   TEXT,
    finished_at  TEXT,
    heartbeat_at TEXT,
    UNIQUE (study_id, number)
);

CREATE INDEX trials_by_state ON trials (study_id, state);

CREATE TABLE measurements (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    trial_id    INTEGER NOT NULL REFERENCES trials (id) ON DELETE CASCADE,
    step        INTEGER,                -- NULL for a final report
    metric      TEXT NOT NULL,
    value       REAL NOT NULL,
    recorded_at TEXT NOT NULL
);

CREATE INDEX measurements_by_trial ON measurements (trial_id, step);
