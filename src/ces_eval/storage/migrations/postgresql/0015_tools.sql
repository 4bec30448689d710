-- Tool, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).
-- Written by tools/migrations.py from the declaration; frozen once released.

CREATE TABLE tools (
  name TEXT COLLATE "C" PRIMARY KEY,
  parent TEXT COLLATE "C" NOT NULL,
  display_name TEXT COLLATE "C" NOT NULL,
  create_time BIGINT NOT NULL,
  update_time BIGINT NOT NULL,
  etag TEXT NOT NULL,
  data BYTEA NOT NULL,
  execution_type INTEGER NOT NULL
);
CREATE INDEX tools_parent_name ON tools (parent, name);
CREATE INDEX tools_parent_create_time ON tools (parent, create_time, name);
CREATE INDEX tools_parent_update_time ON tools (parent, update_time, name);
