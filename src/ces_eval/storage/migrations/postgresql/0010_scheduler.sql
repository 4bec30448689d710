-- The scheduler: ProjectClock (a project's clock moved forward by the emulator), a generic table
-- (ces_eval.storage.tables) of its fixed columns only; and the schedules found by when they are
-- due (only active ones have a next execution time).

CREATE TABLE project_clocks (
  name TEXT COLLATE "C" PRIMARY KEY,
  parent TEXT COLLATE "C" NOT NULL,
  display_name TEXT COLLATE "C" NOT NULL,
  create_time BIGINT NOT NULL,
  update_time BIGINT NOT NULL,
  etag TEXT NOT NULL,
  data BYTEA NOT NULL
);
CREATE INDEX project_clocks_parent_name ON project_clocks (parent, name);
CREATE INDEX project_clocks_parent_create_time ON project_clocks (parent, create_time, name);
CREATE INDEX project_clocks_parent_update_time ON project_clocks (parent, update_time, name);
CREATE INDEX scheduled_evaluation_runs_due
  ON scheduled_evaluation_runs (next_scheduled_execution_time, name);
