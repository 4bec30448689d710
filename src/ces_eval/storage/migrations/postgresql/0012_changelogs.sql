-- Changelog, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).
-- Written by tools/migrations.py from the declaration; frozen once released.

CREATE TABLE changelogs (
  name TEXT COLLATE "C" PRIMARY KEY,
  parent TEXT COLLATE "C" NOT NULL,
  display_name TEXT COLLATE "C" NOT NULL,
  create_time BIGINT NOT NULL,
  update_time BIGINT NOT NULL,
  etag TEXT NOT NULL,
  data BYTEA NOT NULL,
  author TEXT COLLATE "C" NOT NULL,
  resource TEXT COLLATE "C" NOT NULL,
  resource_type TEXT COLLATE "C" NOT NULL,
  action TEXT COLLATE "C" NOT NULL,
  sequence_number BIGINT NOT NULL
);
CREATE INDEX changelogs_parent_name ON changelogs (parent, name);
CREATE INDEX changelogs_parent_create_time ON changelogs (parent, create_time, name);
CREATE INDEX changelogs_parent_update_time ON changelogs (parent, update_time, name);
