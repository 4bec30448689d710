-- Agent, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).
-- Written by tools/migrations.py from the declaration; frozen once released.

CREATE TABLE agents (
  name TEXT COLLATE "C" PRIMARY KEY,
  parent TEXT COLLATE "C" NOT NULL,
  display_name TEXT COLLATE "C" NOT NULL,
  create_time BIGINT NOT NULL,
  update_time BIGINT NOT NULL,
  etag TEXT NOT NULL,
  data BYTEA NOT NULL,
  tools JSONB NOT NULL,
  child_agents JSONB NOT NULL,
  guardrails JSONB NOT NULL
);
CREATE UNIQUE INDEX agents_parent_display_name ON agents (parent, display_name);
CREATE INDEX agents_parent_name ON agents (parent, name);
CREATE INDEX agents_parent_create_time ON agents (parent, create_time, name);
CREATE INDEX agents_parent_update_time ON agents (parent, update_time, name);
