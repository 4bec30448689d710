-- Example, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).
-- Written by tools/migrations.py from the declaration; frozen once released.

CREATE TABLE examples (
  name TEXT PRIMARY KEY,
  parent TEXT NOT NULL,
  display_name TEXT NOT NULL,
  create_time INTEGER NOT NULL,
  update_time INTEGER NOT NULL,
  etag TEXT NOT NULL,
  data BLOB NOT NULL,
  entry_agent TEXT NOT NULL
);
CREATE UNIQUE INDEX examples_parent_display_name ON examples (parent, display_name);
CREATE INDEX examples_parent_name ON examples (parent, name);
CREATE INDEX examples_parent_create_time ON examples (parent, create_time, name);
CREATE INDEX examples_parent_update_time ON examples (parent, update_time, name);
