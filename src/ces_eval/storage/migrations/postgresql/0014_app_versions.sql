-- AppVersion, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).
-- Written by tools/migrations.py from the declaration; frozen once released.

CREATE TABLE app_versions (
  name TEXT COLLATE "C" PRIMARY KEY,
  parent TEXT COLLATE "C" NOT NULL,
  display_name TEXT COLLATE "C" NOT NULL,
  create_time BIGINT NOT NULL,
  update_time BIGINT NOT NULL,
  etag TEXT NOT NULL,
  data BYTEA NOT NULL,
  description TEXT COLLATE "C" NOT NULL,
  creator TEXT COLLATE "C" NOT NULL
);
CREATE INDEX app_versions_parent_name ON app_versions (parent, name);
CREATE INDEX app_versions_parent_create_time ON app_versions (parent, create_time, name);
CREATE INDEX app_versions_parent_update_time ON app_versions (parent, update_time, name);
