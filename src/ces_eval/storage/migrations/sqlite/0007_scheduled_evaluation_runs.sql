-- ScheduledEvaluationRun, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).

CREATE TABLE scheduled_evaluation_runs (
  name TEXT PRIMARY KEY,
  parent TEXT NOT NULL,
  display_name TEXT NOT NULL,
  create_time INTEGER NOT NULL,
  update_time INTEGER NOT NULL,
  etag TEXT NOT NULL,
  data BLOB NOT NULL,
  description TEXT NOT NULL,
  active INTEGER NOT NULL,
  created_by TEXT NOT NULL,
  last_updated_by TEXT NOT NULL,
  total_executions INTEGER NOT NULL,
  last_completed_run TEXT NOT NULL,
  next_scheduled_execution_time INTEGER,
  request_evaluations TEXT NOT NULL,
  request_evaluation_dataset TEXT NOT NULL
);
CREATE INDEX scheduled_evaluation_runs_parent_name ON scheduled_evaluation_runs (parent, name);
CREATE INDEX scheduled_evaluation_runs_parent_create_time ON scheduled_evaluation_runs (parent, create_time, name);
CREATE INDEX scheduled_evaluation_runs_parent_update_time ON scheduled_evaluation_runs (parent, update_time, name);
