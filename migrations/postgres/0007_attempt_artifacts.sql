-- As migrations/sqlite/0007_attempt_artifacts.sql: the model folder of a trial's attempt
-- (HPTUNE_OUTPUT_DIR and AIP_MODEL_DIR of its worker) and when hptune removed it
-- (`artifacts.keep_best`); the attempt's row gets the folder when the attempt ends.

ALTER TABLE trials ADD COLUMN artifact_dir TEXT;
ALTER TABLE trials ADD COLUMN artifact_removed_at TEXT;
ALTER TABLE attempts ADD COLUMN artifact_dir TEXT;
ALTER TABLE attempts ADD COLUMN artifact_removed_at TEXT;

CREATE OR REPLACE FUNCTION attempt_closes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE attempts
    SET finished_at = NEW.finished_at, outcome = NEW.state, error = NEW.error, worker = NEW.worker,
        artifact_dir = NEW.artifact_dir
    WHERE trial_id = NEW.id AND attempt = NEW.attempt;
    RETURN NULL;
END;
$$;
