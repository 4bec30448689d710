-- AppVersion, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).
-- Written by tools/migrations.py from the declaration; frozen once released.

CREATE TABLE app_versions (
  name TEXT PRIMARY KEY,
  parent TEXT NOT NULL,
  display_name TEXT NOT NULL,
  create_time INTEGER NOT NULL,
  update_time INTEGER NOT NULL,
  etag TEXT NOT NULL,
  data BLOB NOT NULL,
  description TEXT NOT NULL,
  creator TEXT NOT NULL
);
CREATE INDEX app_versions_parent_name ON app_versions (parent, name);
CREATE INDEX app_versions_parent_create_time ON app_versions (parent, create_time, name);
CREATE INDEX app_versions_parent_update_time ON app_versions (parent, update_time, name);
