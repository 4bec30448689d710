-- EvaluationDataset, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).

CREATE TABLE evaluation_datasets (
  name TEXT PRIMARY KEY,
  parent TEXT NOT NULL,
  display_name TEXT NOT NULL,
  create_time INTEGER NOT NULL,
  update_time INTEGER NOT NULL,
  etag TEXT NOT NULL,
  data BLOB NOT NULL,
  evaluations TEXT NOT NULL,
  created_by TEXT NOT NULL,
  last_updated_by TEXT NOT NULL
);
CREATE UNIQUE INDEX evaluation_datasets_parent_display_name ON evaluation_datasets (parent, display_name);
CREATE INDEX evaluation_datasets_parent_name ON evaluation_datasets (parent, name);
CREATE INDEX evaluation_datasets_parent_create_time ON evaluation_datasets (parent, create_time, name);
CREATE INDEX evaluation_datasets_parent_update_time ON evaluation_datasets (parent, update_time, name);
