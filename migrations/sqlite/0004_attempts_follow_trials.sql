-- The attempts table follows the trials table: a trial that starts an attempt (its first when
-- it is inserted, the next when its attempt number grows) opens that attempt's row, and a
-- trial that ends closes it with the same outcome, error and worker. Triggers make each of
-- these one statement that cannot leave the two tables disagreeing, and save the controller
-- a round trip to the database per statement on the path every trial takes. A retry closes
-- the attempt it ends itself ('retried' is not a state of the trial).

CREATE TRIGGER attempt_opens_with_trial AFTER INSERT ON trials
BEGIN
    INSERT INTO attempts (trial_id, attempt, owner, started_at)
    VALUES (NEW.id, NEW.attempt, NEW.owner, COALESCE(NEW.started_at, NEW.created_at));
END;

CREATE TRIGGER attempt_opens_on_retry AFTER UPDATE OF attempt ON trials
WHEN NEW.attempt > OLD.attempt
BEGIN
    INSERT INTO attempts (trial_id, attempt, owner, started_at)
    VALUES (NEW.id, NEW.attempt, NEW.owner, COALESCE(NEW.started_at, NEW.created_at));
END;

CREATE TRIGGER attempt_closes_with_trial AFTER UPDATE OF state ON trials
WHEN NEW.state IN ('succeeded', 'failed', 'stopped') AND OLD.state NOT IN ('succeeded', 'failed', 'stopped')
BEGIN
    UPDATE attempts
    SET finished_at = NEW.finished_at, outcome = NEW.state, error = NEW.error, worker = NEW.worker
    WHERE trial_id = NEW.id AND attempt = NEW.attempt;
END;
