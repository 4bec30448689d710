-- SecuritySettings, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).
-- Written by tools/migrations.py from the declaration; frozen once released.

CREATE TABLE security_settings (
  name TEXT PRIMARY KEY,
  parent TEXT NOT NULL,
  display_name TEXT NOT NULL,
  create_time INTEGER NOT NULL,
  update_time INTEGER NOT NULL,
  etag TEXT NOT NULL,
  data BLOB NOT NULL
);
CREATE INDEX security_settings_parent_name ON security_settings (parent, name);
CREATE INDEX security_settings_parent_create_time ON security_settings (parent, create_time, name);
CREATE INDEX security_settings_parent_update_time ON security_settings (parent, update_time, name);
