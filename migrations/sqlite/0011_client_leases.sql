-- Trials held by an ask/tell client (`hptune ask`) rather than a controller: when the client's
-- lease ends (UTC, RFC 3339) and its length in seconds (each `hptune tell --step` renews it
-- for as long). NULL for a controller's trials, which heartbeats keep alive instead. A trial
-- whose lease has ended goes back to the study as an interrupted attempt.

ALTER TABLE trials ADD COLUMN lease_expires_at TEXT;
ALTER TABLE trials ADD COLUMN lease_seconds BIGINT;
