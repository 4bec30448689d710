-- Agent, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).
-- Written by tools/migrations.py from the declaration; frozen once released.

CREATE TABLE agents (
  name TEXT PRIMARY KEY,
  parent TEXT NOT NULL,
  display_name TEXT NOT NULL,
  create_time INTEGER NOT NULL,
  update_time INTEGER NOT NULL,
  etag TEXT NOT NULL,
  data BLOB NOT NULL,
  tools TEXT NOT NULL,
  child_agents TEXT NOT NULL,
  guardrails TEXT NOT NULL
);
CREATE UNIQUE INDEX agents_parent_display_name ON agents (parent, display_name);
CREATE INDEX agents_parent_name ON agents (parent, name);
CREATE INDEX agents_parent_create_time ON agents (parent, create_time, name);
CREATE INDEX agents_parent_update_time ON agents (parent, update_time, name);
