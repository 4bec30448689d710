-- Long-running operations (google.longrunning.Operation), persisted so they survive restarts.
-- `data` is the serialized Operation; the other columns are what listing and recovery need.
CREATE TABLE operations (
  name TEXT PRIMARY KEY,
  parent TEXT NOT NULL,
  method TEXT NOT NULL,
  done INTEGER NOT NULL,
  cancel_requested INTEGER NOT NULL DEFAULT 0,
  create_time INTEGER NOT NULL,
  update_time INTEGER NOT NULL,
  data BLOB NOT NULL
);
CREATE INDEX operations_parent_name ON operations (parent, name);
CREATE INDEX operations_done ON operations (done);
