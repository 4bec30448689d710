-- Guardrail, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).
-- Written by tools/migrations.py from the declaration; frozen once released.

CREATE TABLE guardrails (
  name TEXT COLLATE "C" PRIMARY KEY,
  parent TEXT COLLATE "C" NOT NULL,
  display_name TEXT COLLATE "C" NOT NULL,
  create_time BIGINT NOT NULL,
  update_time BIGINT NOT NULL,
  etag TEXT NOT NULL,
  data BYTEA NOT NULL,
  enabled BOOLEAN NOT NULL
);
CREATE UNIQUE INDEX guardrails_parent_display_name ON guardrails (parent, display_name);
CREATE INDEX guardrails_parent_name ON guardrails (parent, name);
CREATE INDEX guardrails_parent_create_time ON guardrails (parent, create_time, name);
CREATE INDEX guardrails_parent_update_time ON guardrails (parent, update_time, name);
