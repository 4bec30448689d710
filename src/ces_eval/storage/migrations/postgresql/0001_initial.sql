-- Evaluations, their results and long-running operations; the same tables and columns as the
-- SQLite schema (see migrations/sqlite). Times are microseconds since the Unix epoch (UTC),
-- except operation leases, which use the database clock so that replicas' clocks never matter.
-- Names and other sort keys use the "C" collation: code point order, as on SQLite, and the order
-- the keyset indexes and page tokens rely on.

CREATE TABLE meta (
  key TEXT PRIMARY KEY,
  value BYTEA NOT NULL
);

CREATE TABLE evaluations (
  name TEXT COLLATE "C" PRIMARY KEY,
  app TEXT COLLATE "C" NOT NULL,
  display_name TEXT COLLATE "C" NOT NULL,
  description TEXT COLLATE "C" NOT NULL,
  create_time BIGINT NOT NULL,
  update_time BIGINT NOT NULL,
  created_by TEXT COLLATE "C" NOT NULL,
  last_updated_by TEXT COLLATE "C" NOT NULL,
  tags JSONB NOT NULL,
  evaluation_datasets JSONB NOT NULL,
  etag TEXT NOT NULL,
  data BYTEA NOT NULL,
  derived BYTEA NOT NULL
);
CREATE UNIQUE INDEX evaluations_app_display_name ON evaluations (app, display_name);
CREATE INDEX evaluations_app_name ON evaluations (app, name);
CREATE INDEX evaluations_app_create_time ON evaluations (app, create_time, name);
CREATE INDEX evaluations_app_update_time ON evaluations (app, update_time, name);

CREATE TABLE evaluation_results (
  name TEXT COLLATE "C" PRIMARY KEY,
  evaluation TEXT COLLATE "C" NOT NULL REFERENCES evaluations (name) ON DELETE CASCADE,
  app TEXT COLLATE "C" NOT NULL,
  display_name TEXT COLLATE "C" NOT NULL,
  create_time BIGINT NOT NULL,
  update_time BIGINT NOT NULL,
  evaluation_run TEXT COLLATE "C" NOT NULL,
  execution_state INTEGER NOT NULL,
  evaluation_status INTEGER NOT NULL,
  app_version TEXT COLLATE "C" NOT NULL,
  initiated_by TEXT COLLATE "C" NOT NULL,
  golden_run_method INTEGER NOT NULL,
  data BYTEA NOT NULL
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

CREATE TABLE operations (
  name TEXT COLLATE "C" PRIMARY KEY,
  parent TEXT COLLATE "C" NOT NULL,
  method TEXT NOT NULL,
  done BOOLEAN NOT NULL,
  cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
  create_time BIGINT NOT NULL,
  update_time BIGINT NOT NULL,
  owner TEXT NOT NULL,
  lease_until TIMESTAMPTZ NOT NULL,
  data BYTEA NOT NULL
);
CREATE INDEX operations_parent_name ON operations (parent, name);
CREATE INDEX operations_running_lease ON operations (lease_until) WHERE NOT done;
CREATE INDEX operations_running_owner ON operations (owner) WHERE NOT done;
