-- Deployment, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).
-- Written by tools/migrations.py from the declaration; frozen once released.

CREATE TABLE deployments (
  name TEXT PRIMARY KEY,
  parent TEXT NOT NULL,
  display_name TEXT NOT NULL,
  create_time INTEGER NOT NULL,
  update_time INTEGER NOT NULL,
  etag TEXT NOT NULL,
  data BLOB NOT NULL,
  app_version TEXT NOT NULL
);
CREATE UNIQUE INDEX deployments_parent_display_name ON deployments (parent, display_name);
CREATE INDEX deployments_parent_name ON deployments (parent, name);
CREATE INDEX deployments_parent_create_time ON deployments (parent, create_time, name);
CREATE INDEX deployments_parent_update_time ON deployments (parent, update_time, name);
