-- App, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).
-- Written by tools/migrations.py from the declaration; frozen once released.

CREATE TABLE apps (
  name TEXT PRIMARY KEY,
  parent TEXT NOT NULL,
  display_name TEXT NOT NULL,
  create_time INTEGER NOT NULL,
  update_time INTEGER NOT NULL,
  etag TEXT NOT NULL,
  data BLOB NOT NULL,
  description TEXT NOT NULL,
  pinned INTEGER NOT NULL,
  locked INTEGER NOT NULL,
  root_agent TEXT NOT NULL
);
CREATE INDEX apps_parent_name ON apps (parent, name);
CREATE INDEX apps_parent_create_time ON apps (parent, create_time, name);
CREATE INDEX apps_parent_update_time ON apps (parent, update_time, name);
