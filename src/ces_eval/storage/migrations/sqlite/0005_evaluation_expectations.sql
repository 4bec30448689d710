-- EvaluationExpectation, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).

CREATE TABLE evaluation_expectations (
  name TEXT PRIMARY KEY,
  parent TEXT NOT NULL,
  display_name TEXT NOT NULL,
  create_time INTEGER NOT NULL,
  update_time INTEGER NOT NULL,
  etag TEXT NOT NULL,
  data BLOB NOT NULL,
  tags TEXT NOT NULL
);
CREATE UNIQUE INDEX evaluation_expectations_parent_display_name ON evaluation_expectations (parent, display_name);
CREATE INDEX evaluation_expectations_parent_name ON evaluation_expectations (parent, name);
CREATE INDEX evaluation_expectations_parent_create_time ON evaluation_expectations (parent, create_time, name);
CREATE INDEX evaluation_expectations_parent_update_time ON evaluation_expectations (parent, update_time, name);
