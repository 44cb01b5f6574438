-- A trial ends only by the controller that owns its current attempt. A controller that was
-- stopped (SIGSTOP, a suspended laptop) past the staleness limit finds, when it runs again,
-- that another controller took its trials over and may have ended them, or run them again as
-- a new attempt. Its end of such a trial names itself as the owner and the attempt it ran
-- (unchanged columns for the rightful controller): the database refuses the end when either
-- differs from the row, or when the trial has ended already, and the stale controller learns
-- that its result is not the study's.

CREATE TRIGGER trial_ends_by_its_owner BEFORE UPDATE OF state ON trials
WHEN NEW.state IN ('succeeded', 'failed', 'stopped')
  AND (OLD.state IN ('succeeded', 'failed', 'stopped')
       OR NEW.owner IS NOT OLD.owner
       OR NEW.attempt IS NOT OLD.attempt)
BEGIN
    SELECT RAISE(ABORT, 'hptune: trial taken over by another controller');
END;
