// The schema of each store as ordered lists of migrations, kept in step: migration N means the same tables in
// SQLite (`PRAGMA user_version` records how many have run) and PostgreSQL (`onnxd_schema.version`).
// Append only, to both lists at once: never edit a migration that has shipped. Imports: nothing.

export const MIGRATIONS: readonly string[] = [
  // 1: accounts, keys, usage per key/model/day.
  `
  CREATE TABLE accounts (
    id             TEXT PRIMARY KEY,
    name           TEXT NOT NULL,
    email          TEXT,
    balance_micros INTEGER NOT NULL DEFAULT 0,
    subscription   TEXT NOT NULL DEFAULT 'active' CHECK (subscription IN ('active', 'inactive')),
    created_at     INTEGER NOT NULL
  ) STRICT;

  CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    account_id   TEXT NOT NULL REFERENCES accounts(id),
    name         TEXT,
    hash         BLOB NOT NULL UNIQUE,
    redacted     TEXT NOT NULL,
    rpm_limit    INTEGER,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at   INTEGER
  ) STRICT;
  CREATE INDEX api_keys_account ON api_keys(account_id);

  CREATE TABLE usage (
    key_id            TEXT NOT NULL REFERENCES api_keys(id),
    account_id        TEXT NOT NULL REFERENCES accounts(id),
    model             TEXT NOT NULL,
    day               TEXT NOT NULL,
    requests          INTEGER NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cost_micros       INTEGER NOT NULL,
    PRIMARY KEY (key_id, model, day)
  ) STRICT;
  CREATE INDEX usage_account_day ON usage(account_id, day);
  `,
  // 2: completions in flight, written as they go and settled when they end (or, after a crash, by recovery).
  `
  CREATE TABLE inflight (
    id                TEXT PRIMARY KEY,
    owner             TEXT NOT NULL,
    key_id            TEXT NOT NULL REFERENCES api_keys(id),
    account_id        TEXT NOT NULL REFERENCES accounts(id),
    model             TEXT NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cost_micros       INTEGER NOT NULL,
    started_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    settled_at        INTEGER
  ) STRICT;
  CREATE INDEX inflight_open ON inflight(settled_at, updated_at);
  CREATE INDEX inflight_owner ON inflight(owner, settled_at);
  `,
  // 3: ids of completions recorded, so that a record sent again (its first outcome unknown) is billed once.
  `
  CREATE TABLE billed (
    id        TEXT PRIMARY KEY,
    billed_at INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX billed_age ON billed(billed_at);
  `,
  // 4: responses kept for OpenAI's Responses API (store: true), each visible to its account only.
  `
  CREATE TABLE responses (
    id           TEXT PRIMARY KEY,
    account_id   TEXT NOT NULL REFERENCES accounts(id),
    created_at   INTEGER NOT NULL,
    response     TEXT NOT NULL,
    input_items  TEXT NOT NULL,
    conversation TEXT NOT NULL
  ) STRICT;
  CREATE INDEX responses_account ON responses(account_id);
  `,
]

/** The same schema in PostgreSQL: one entry per SQLite migration above (a test holds the two lists to one length). */
export const PG_MIGRATIONS: readonly string[] = [
  // 1: accounts, keys, usage per key/model/day.
  `
  CREATE TABLE accounts (
    id             TEXT PRIMARY KEY,
    name           TEXT NOT NULL,
    email          TEXT,
    balance_micros BIGINT NOT NULL DEFAULT 0,
    subscription   TEXT NOT NULL DEFAULT 'active' CHECK (subscription IN ('active', 'inactive')),
    created_at     BIGINT NOT NULL
  );

  CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    account_id   TEXT NOT NULL REFERENCES accounts(id),
    name         TEXT,
    hash         BYTEA NOT NULL UNIQUE,
    redacted     TEXT NOT NULL,
    rpm_limit    INTEGER,
    created_at   BIGINT NOT NULL,
    last_used_at BIGINT,
    revoked_at   BIGINT
  );
  CREATE INDEX api_keys_account ON api_keys(account_id);

  CREATE TABLE usage (
    key_id            TEXT NOT NULL REFERENCES api_keys(id),
    account_id        TEXT NOT NULL REFERENCES accounts(id),
    model             TEXT NOT NULL,
    day               TEXT NOT NULL,
    requests          BIGINT NOT NULL,
    prompt_tokens     BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    cost_micros       BIGINT NOT NULL,
    PRIMARY KEY (key_id, model, day)
  );
  CREATE INDEX usage_account_day ON usage(account_id, day);
  `,
  // 2: completions in flight, written as they go and settled when they end (or, after a crash, by recovery).
  `
  CREATE TABLE inflight (
    id                TEXT PRIMARY KEY,
    owner             TEXT NOT NULL,
    key_id            TEXT NOT NULL REFERENCES api_keys(id),
    account_id        TEXT NOT NULL REFERENCES accounts(id),
    model             TEXT NOT NULL,
    prompt_tokens     BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    cost_micros       BIGINT NOT NULL,
    started_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL,
    settled_at        BIGINT
  );
  CREATE INDEX inflight_open ON inflight(settled_at, updated_at);
  CREATE INDEX inflight_owner ON inflight(owner, settled_at);
  `,
  // 3: ids of completions recorded, so that a record sent again (its first outcome unknown) is billed once.
  `
  CREATE TABLE billed (
    id        TEXT PRIMARY KEY,
    billed_at BIGINT NOT NULL
  );
  CREATE INDEX billed_age ON billed(billed_at);
  `,
  // 4: responses kept for OpenAI's Responses API (store: true), each visible to its account only.
  `
  CREATE TABLE responses (
    id           TEXT PRIMARY KEY,
    account_id   TEXT NOT NULL REFERENCES accounts(id),
    created_at   BIGINT NOT NULL,
    response     TEXT NOT NULL,
    input_items  TEXT NOT NULL,
    conversation TEXT NOT NULL
  );
  CREATE INDEX responses_account ON responses(account_id);
  `,
]
