-- As migrations/sqlite/0004_attempts_follow_trials.sql, in PL/pgSQL: the attempts table
-- follows the trials table (an attempt's row opens when the trial starts it, closes when the
-- trial ends), each change one statement of the controller.

CREATE FUNCTION attempt_opens() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO attempts (trial_id, attempt, owner, started_at)
    VALUES (NEW.id, NEW.attempt, NEW.owner, COALESCE(NEW.started_at, NEW.created_at));
    RETURN NULL;
END;
$$;

CREATE FUNCTION attempt_closes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE attempts
    SET finished_at = NEW.finished_at, outcome = NEW.state, error = NEW.error, worker = NEW.worker
    WHERE trial_id = NEW.id AND attempt = NEW.attempt;
    RETURN NULL;
END;
$$;

CREATE TRIGGER attempt_opens_with_trial AFTER INSERT ON trials
FOR EACH ROW EXECUTE FUNCTION attempt_opens();

CREATE TRIGGER attempt_opens_on_retry AFTER UPDATE OF attempt ON trials
FOR EACH ROW WHEN (NEW.attempt > OLD.attempt) EXECUTE FUNCTION attempt_opens();

CREATE TRIGGER attempt_closes_with_trial AFTER UPDATE OF state ON trials
FOR EACH ROW
WHEN (NEW.state IN ('succeeded', 'failed', 'stopped') AND OLD.state NOT IN ('succeeded', 'failed', 'stopped'))
EXECUTE FUNCTION attempt_closes();
