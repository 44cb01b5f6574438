-- The storage model of DESIGN.md, as migrations/sqlite/0001_initial.sql, in PostgreSQL's types.
-- Times are UTC RFC 3339 text with milliseconds, so they sort as they compare.

CREATE TABLE studies (
    id          BIGSERIAL PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    metric      TEXT NOT NULL,
    goal        TEXT NOT NULL CHECK (goal IN ('maximize', 'minimize')),
    spec        TEXT NOT NULL,
    space       TEXT NOT NULL,
    created_at  TEXT NOT NULL
);

CREATE TABLE trials (
    id           BIGSERIAL PRIMARY KEY,
    study_id     BIGINT NOT NULL REFERENCES studies (id) ON DELETE CASCADE,
    number       BIGINT NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'stopped')),
    params       TEXT NOT NULL,
    value        DOUBLE PRECISION,
    error        TEXT,
    worker       TEXT,
    log_path     TEXT,
    created_at   TEXT NOT NULL,
    started_at   TEXT,
    finished_at  TEXT,
    heartbeat_at TEXT,
    UNIQUE (study_id, number)
);

CREATE INDEX trials_by_state ON trials (study_id, state);

CREATE TABLE measurements (
    id          BIGSERIAL PRIMARY KEY,
    trial_id    BIGINT NOT NULL REFERENCES trials (id) ON DELETE CASCADE,
    step        BIGINT,
    metric      TEXT NOT NULL,
    value       DOUBLE PRECISION NOT NULL,
    recorded_at TEXT NOT NULL
);

CREATE INDEX measurements_by_trial ON measurements (trial_id, step);
