-- Guardrail, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).
-- Written by tools/migrations.py from the declaration; frozen once released.

CREATE TABLE guardrails (
  name TEXT PRIMARY KEY,
  parent TEXT NOT NULL,
  display_name TEXT NOT NULL,
  create_time INTEGER NOT NULL,
  update_time INTEGER NOT NULL,
  etag TEXT NOT NULL,
  data BLOB NOT NULL,
  enabled INTEGER NOT NULL
);
CREATE UNIQUE INDEX guardrails_parent_display_name ON guardrails (parent, display_name);
CREATE INDEX guardrails_parent_name ON guardrails (parent, name);
CREATE INDEX guardrails_parent_create_time ON guardrails (parent, create_time, name);
CREATE INDEX guardrails_parent_update_time ON guardrails (parent, update_time, name);
