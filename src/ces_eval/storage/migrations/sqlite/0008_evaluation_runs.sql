-- EvaluationRun, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).

CREATE TABLE evaluation_runs (
  name TEXT PRIMARY KEY,
  parent TEXT NOT NULL,
  display_name TEXT NOT NULL,
  create_time INTEGER NOT NULL,
  update_time INTEGER NOT NULL,
  etag TEXT NOT NULL,
  data BLOB NOT NULL,
  initiated_by TEXT NOT NULL,
  app_version TEXT NOT NULL,
  app_version_display_name TEXT NOT NULL,
  evaluations TEXT NOT NULL,
  evaluation_dataset TEXT NOT NULL,
  evaluation_type INTEGER NOT NULL,
  state INTEGER NOT NULL,
  scheduled_evaluation_run TEXT NOT NULL,
  golden_run_method INTEGER NOT NULL,
  run_count INTEGER NOT NULL
);
CREATE INDEX evaluation_runs_parent_name ON evaluation_runs (parent, name);
CREATE INDEX evaluation_runs_parent_create_time ON evaluation_runs (parent, create_time, name);
CREATE INDEX evaluation_runs_parent_update_time ON evaluation_runs (parent, update_time, name);
