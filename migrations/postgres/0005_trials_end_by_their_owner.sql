-- As migrations/sqlite/0005_trials_end_by_their_owner.sql, in PL/pgSQL: a trial ends only by
-- the controller that owns its current attempt.

CREATE FUNCTION refuse_trial_end() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'hptune: trial taken over by another controller';
END;
$$;

CREATE TRIGGER trial_ends_by_its_owner BEFORE UPDATE OF state ON trials
FOR EACH ROW
WHEN (NEW.state IN ('succeeded', 'failed', 'stopped')
      AND (OLD.state IN ('succeeded', 'failed', 'stopped')
           OR NEW.owner IS DISTINCT FROM OLD.owner
           OR NEW.attempt IS DISTINCT FROM OLD.attempt))
EXECUTE FUNCTION refuse_trial_end();
