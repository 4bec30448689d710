-- EvaluationExpectation, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).

CREATE TABLE evaluation_expectations (
  name TEXT COLLATE "C" PRIMARY KEY,
  parent TEXT COLLATE "C" NOT NULL,
  display_name TEXT COLLATE "C" NOT NULL,
  create_time BIGINT NOT NULL,
  update_time BIGINT NOT NULL,
  etag TEXT NOT NULL,
  data BYTEA NOT NULL,
  tags JSONB NOT NULL
);
CREATE UNIQUE INDEX evaluation_expectations_parent_display_name ON evaluation_expectations (parent, display_name);
CREATE INDEX evaluation_expectations_parent_name ON evaluation_expectations (parent, name);
CREATE INDEX evaluation_expectations_parent_create_time ON evaluation_expectations (parent, create_time, name);
CREATE INDEX evaluation_expectations_parent_update_time ON evaluation_expectations (parent, update_time, name);
