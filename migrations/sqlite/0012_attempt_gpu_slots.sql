-- The slot of a trial's attempt on a GPU it shares (trial.resources.gpus: 1/K): from 0 to
-- K - 1, NULL for an attempt on whole GPUs, without GPUs, or taken over from a controller
-- that is gone (its worker keeps the slot it held). `trials.gpu_slot` is the current
-- attempt's, `attempts.gpu_slot` each attempt's; both are written with the attempt's GPUs.

ALTER TABLE trials ADD COLUMN gpu_slot INTEGER;
ALTER TABLE attempts ADD COLUMN gpu_slot INTEGER;
