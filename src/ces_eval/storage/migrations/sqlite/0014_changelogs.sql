-- Changelog, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).
-- Written by tools/migrations.py from the declaration; frozen once released.

CREATE TABLE changelogs (
  name TEXT PRIMARY KEY,
  parent TEXT NOT NULL,
  display_name TEXT NOT NULL,
  create_time INTEGER NOT NULL,
  update_time INTEGER NOT NULL,
  etag TEXT NOT NULL,
  data BLOB NOT NULL,
  author TEXT NOT NULL,
  resource TEXT NOT NULL,
  resource_type TEXT NOT NULL,
  action TEXT NOT NULL,
  sequence_number INTEGER NOT NULL
);
CREATE INDEX changelogs_parent_name ON changelogs (parent, name);
CREATE INDEX changelogs_parent_create_time ON changelogs (parent, create_time, name);
CREATE INDEX changelogs_parent_update_time ON changelogs (parent, update_time, name);
