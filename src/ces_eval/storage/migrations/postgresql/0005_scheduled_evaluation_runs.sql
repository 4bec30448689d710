-- ScheduledEvaluationRun, a generic table (ces_eval.storage.tables): its fixed columns, then one
-- per filter field of its declaration. Times are microseconds since the Unix epoch (UTC).

CREATE TABLE scheduled_evaluation_runs (
  name TEXT COLLATE "C" PRIMARY KEY,
  parent TEXT COLLATE "C" NOT NULL,
  display_name TEXT COLLATE "C" NOT NULL,
  create_time BIGINT NOT NULL,
  update_time BIGINT NOT NULL,
  etag TEXT NOT NULL,
  data BYTEA NOT NULL,
  description TEXT COLLATE "C" NOT NULL,
  active BOOLEAN NOT NULL,
  created_by TEXT COLLATE "C" NOT NULL,
  last_updated_by TEXT COLLATE "C" NOT NULL,
  total_executions BIGINT NOT NULL,
  last_completed_run TEXT COLLATE "C" NOT NULL,
  next_scheduled_execution_time BIGINT,
  request_evaluations JSONB NOT NULL,
  request_evaluation_dataset TEXT COLLATE "C" NOT NULL
);
CREATE INDEX scheduled_evaluation_runs_parent_name ON scheduled_evaluation_runs (parent, name);
CREATE INDEX scheduled_evaluation_runs_parent_create_time ON scheduled_evaluation_runs (parent, create_time, name);
CREATE INDEX scheduled_evaluation_runs_parent_update_time ON scheduled_evaluation_runs (parent, update_time, name);
