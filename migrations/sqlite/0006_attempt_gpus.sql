-- The GPUs of a trial's attempt (trial.resources.gpus), as the worker's HPTUNE_GPUS names
-- them: comma-separated, NULL for a trial without GPUs. `trials.gpus` is the current
-- attempt's (a controller that takes the trial over reads it, and its worker keeps them);
-- `attempts.gpus` keeps each attempt's. Both are written before the attempt's worker starts.

ALTER TABLE trials ADD COLUMN gpus TEXT;
ALTER TABLE attempts ADD COLUMN gpus TEXT;
