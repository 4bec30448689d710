-- OutcomeRule (the emulator's scripted outcomes), a generic table (ces_eval.storage.tables):
-- its fixed columns, then one per filter field of its declaration. Times are microseconds
-- since the Unix epoch (UTC). Runs that have not ended are found by their state (the run
-- engine's recovery).

CREATE TABLE outcome_rules (
  name TEXT COLLATE "C" PRIMARY KEY,
  parent TEXT COLLATE "C" NOT NULL,
  display_name TEXT COLLATE "C" NOT NULL,
  create_time BIGINT NOT NULL,
  update_time BIGINT NOT NULL,
  etag TEXT NOT NULL,
  data BYTEA NOT NULL,
  evaluation TEXT COLLATE "C" NOT NULL,
  evaluation_display_name TEXT COLLATE "C" NOT NULL,
  tag TEXT COLLATE "C" NOT NULL,
  outcome INTEGER NOT NULL,
  hold INTEGER NOT NULL,
  released BOOLEAN NOT NULL
);
CREATE INDEX outcome_rules_parent_name ON outcome_rules (parent, name);
CREATE INDEX outcome_rules_parent_create_time ON outcome_rules (parent, create_time, name);
CREATE INDEX outcome_rules_parent_update_time ON outcome_rules (parent, update_time, name);
CREATE INDEX evaluation_runs_state ON evaluation_runs (state, name);
