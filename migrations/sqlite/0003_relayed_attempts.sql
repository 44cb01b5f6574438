-- What the relay of a remote job writes about its attempt: when it last showed it was alive,
-- and the worker's last line of output when it failed.

ALTER TABLE attempts ADD COLUMN heartbeat_at TEXT;
ALTER TABLE attempts ADD COLUMN last_output TEXT;
