-- Each running operation belongs to the process that runs it (`owner`), which renews its lease
-- (`lease_until`, microseconds since the Unix epoch) while it works. An operation whose lease ran
-- out has no process working on it any more and is failed.
ALTER TABLE operations ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE operations ADD COLUMN lease_until INTEGER NOT NULL DEFAULT 0;
CREATE INDEX operations_running_owner ON operations (done, owner);
