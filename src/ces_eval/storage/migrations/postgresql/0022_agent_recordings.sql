-- AgentRecording, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).
-- Written by tools/migrations.py from the declaration; frozen once released.

CREATE TABLE agent_recordings (
  name TEXT COLLATE "C" PRIMARY KEY,
  parent TEXT COLLATE "C" NOT NULL,
  display_name TEXT COLLATE "C" NOT NULL,
  create_time BIGINT NOT NULL,
  update_time BIGINT NOT NULL,
  etag TEXT NOT NULL,
  data BYTEA NOT NULL,
  callee INTEGER NOT NULL,
  evaluation TEXT COLLATE "C" NOT NULL,
  evaluation_run TEXT COLLATE "C" NOT NULL,
  repetition BIGINT NOT NULL
);
CREATE INDEX agent_recordings_parent_name ON agent_recordings (parent, name);
CREATE INDEX agent_recordings_parent_create_time ON agent_recordings (parent, create_time, name);
CREATE INDEX agent_recordings_parent_update_time ON agent_recordings (parent, update_time, name);
