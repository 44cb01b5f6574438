-- The model folder of a trial's attempt (HPTUNE_OUTPUT_DIR and AIP_MODEL_DIR of its worker),
-- and when hptune removed it (`artifacts.keep_best`): `trials` holds the current attempt's,
-- `attempts` each attempt's. The folder is recorded with the worker's handle and copied to the
-- attempt's row when the attempt ends (by the trigger below, or by the retry that ends it).

ALTER TABLE trials ADD COLUMN artifact_dir TEXT;
ALTER TABLE trials ADD COLUMN artifact_removed_at TEXT;
ALTER TABLE attempts ADD COLUMN artifact_dir TEXT;
ALTER TABLE attempts ADD COLUMN artifact_removed_at TEXT;

DROP TRIGGER attempt_closes_with_trial;

CREATE TRIGGER attempt_closes_with_trial AFTER UPDATE OF state ON trials
WHEN NEW.state IN ('succeeded', 'failed', 'stopped') AND OLD.state NOT IN ('succeeded', 'failed', 'stopped')
BEGIN
    UPDATE attempts
    SET finished_at = NEW.finished_at, outcome = NEW.state, error = NEW.error, worker = NEW.worker,
        artifact_dir = NEW.artifact_dir
    WHERE trial_id = NEW.id AND attempt = NEW.attempt;
END;
