-- Conversation, a generic table (ces_eval.storage.tables): its fixed columns, then one per
-- filter field of its declaration. Times are microseconds since the Unix epoch (UTC);
-- create_time holds the start_time (a conversation has no create_time), display_name and etag
-- are empty (it has neither).

CREATE TABLE conversations (
  name TEXT COLLATE "C" PRIMARY KEY,
  parent TEXT COLLATE "C" NOT NULL,
  display_name TEXT COLLATE "C" NOT NULL,
  create_time BIGINT NOT NULL,
  update_time BIGINT NOT NULL,
  etag TEXT NOT NULL,
  data BYTEA NOT NULL,
  source INTEGER NOT NULL,
  channel_type INTEGER NOT NULL,
  entry_agent TEXT COLLATE "C" NOT NULL,
  deployment TEXT COLLATE "C" NOT NULL,
  app_version TEXT COLLATE "C" NOT NULL,
  language_code TEXT COLLATE "C" NOT NULL,
  start_time BIGINT,
  end_time BIGINT,
  turn_count INTEGER NOT NULL
);
CREATE INDEX conversations_parent_name ON conversations (parent, name);
CREATE INDEX conversations_parent_create_time ON conversations (parent, create_time, name);
CREATE INDEX conversations_parent_update_time ON conversations (parent, update_time, name);
