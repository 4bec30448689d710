-- App, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).
-- Written by tools/migrations.py from the declaration; frozen once released.

CREATE TABLE apps (
  name TEXT COLLATE "C" PRIMARY KEY,
  parent TEXT COLLATE "C" NOT NULL,
  display_name TEXT COLLATE "C" NOT NULL,
  create_time BIGINT NOT NULL,
  update_time BIGINT NOT NULL,
  etag TEXT NOT NULL,
  data BYTEA NOT NULL,
  description TEXT COLLATE "C" NOT NULL,
  pinned BOOLEAN NOT NULL,
  locked BOOLEAN NOT NULL,
  root_agent TEXT COLLATE "C" NOT NULL
);
CREATE INDEX apps_parent_name ON apps (parent, name);
CREATE INDEX apps_parent_create_time ON apps (parent, create_time, name);
CREATE INDEX apps_parent_update_time ON apps (parent, update_time, name);
