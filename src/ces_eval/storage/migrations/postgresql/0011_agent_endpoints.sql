-- AgentEndpoint (the team's own agent that an app's runs play against, set through the
-- emulator): a generic table (ces_eval.storage.tables) of its fixed columns only.

CREATE TABLE agent_endpoints (
  name TEXT COLLATE "C" PRIMARY KEY,
  parent TEXT COLLATE "C" NOT NULL,
  display_name TEXT COLLATE "C" NOT NULL,
  create_time BIGINT NOT NULL,
  update_time BIGINT NOT NULL,
  etag TEXT NOT NULL,
  data BYTEA NOT NULL
);
CREATE INDEX agent_endpoints_parent_name ON agent_endpoints (parent, name);
CREATE INDEX agent_endpoints_parent_create_time ON agent_endpoints (parent, create_time, name);
CREATE INDEX agent_endpoints_parent_update_time ON agent_endpoints (parent, update_time, name);
