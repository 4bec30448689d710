-- Evaluations and their results. Times are microseconds since the Unix epoch (UTC).
-- `data` holds the resource as written by callers plus server-maintained fields; for evaluations,
-- `derived` holds only the fields computed from results (aggregated_metrics, evaluation_runs,
-- last_completed_result). Both are serialized protobuf: concatenating them merges them.

CREATE TABLE meta (
  key TEXT PRIMARY KEY,
  value BLOB NOT NULL
);

CREATE TABLE evaluations (
  name TEXT PRIMARY KEY,
  app TEXT NOT NULL,
  display_name TEXT NOT NULL,
  description TEXT NOT NULL,
  create_time INTEGER NOT NULL,
  update_time INTEGER NOT NULL,
  created_by TEXT NOT NULL,
  last_updated_by TEXT NOT NULL,
  tags TEXT NOT NULL,
  evaluation_datasets TEXT NOT NULL,
  etag TEXT NOT NULL,
  data BLOB NOT NULL,
  derived BLOB NOT NULL
);
CREATE UNIQUE INDEX evaluations_app_display_name ON evaluations (app, display_name);
CREATE INDEX evaluations_app_name ON evaluations (app, name);
CREATE INDEX evaluations_app_create_time ON evaluations (app, create_time, name);
CREATE INDEX evaluations_app_update_time ON evaluations (app, update_time, name);

CREATE TABLE evaluation_results (
  name TEXT PRIMARY KEY,
  evaluation TEXT NOT NULL REFERENCES evaluations (name) ON DELETE CASCADE,
  app TEXT NOT NULL,
  display_name TEXT NOT NULL,
  create_time INTEGER NOT NULL,
  update_time INTEGER NOT NULL,
  evaluation_run TEXT NOT NULL,
  execution_state INTEGER NOT NULL,
  evaluation_status INTEGER NOT NULL,
  app_version TEXT NOT NULL,
  initiated_by TEXT NOT NULL,
  golden_run_method INTEGER NOT NULL,
  data BLOB NOT NULL
);
CREATE UNIQUE INDEX results_evaluation_display_name ON evaluation_results (evaluation, display_name);
CREATE INDEX results_evaluation_name ON evaluation_results (evaluation, name);
CREATE INDEX results_evaluation_create_time ON evaluation_results (evaluation, create_time, name);
CREATE INDEX results_evaluation_update_time ON evaluation_results (evaluation, update_time, name);
CREATE INDEX results_app_name ON evaluation_results (app, name);
CREATE INDEX results_app_create_time ON evaluation_results (app, create_time, name);
CREATE INDEX results_app_update_time ON evaluation_results (app, update_time, name);
CREATE INDEX results_app_run_update_time ON evaluation_results (app, evaluation_run, update_time, name);
CREATE INDEX results_evaluation_run ON evaluation_results (evaluation_run);
