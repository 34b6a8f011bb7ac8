-- Switchyard control plane schema. Applied by `switchyard-control-plane` at start (sqlx migrate).
--
-- Rules of thumb: impossible states are rejected by the database itself (foreign keys, CHECKs,
-- unique constraints), so a bug in the API layer cannot write a row the snapshot compiler or the
-- engine would misread. Every admin write bumps `snapshot_revision` in its own transaction.

-- One row: the revision of the route snapshot. Writers `UPDATE ... SET revision = revision + 1`
-- in their transaction; the row lock serialises them, so revisions commit in order.
CREATE TABLE snapshot_revision (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    revision   bigint  NOT NULL DEFAULT 1 CHECK (revision >= 1),
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO snapshot_revision (singleton, revision) VALUES (true, 1);

-- Global settings as one validated JSON document (ranges are checked by the API against the
-- engine's table; unknown keys are rejected there). Absent keys take the engine's defaults.
CREATE TABLE settings (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    value      jsonb   NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(value) = 'object'),
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO settings (singleton) VALUES (true);

CREATE TABLE channels (
    id                   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                 text    NOT NULL CHECK (char_length(name) BETWEEN 1 AND 128),
    provider             text    NOT NULL CHECK (provider IN ('openai', 'anthropic', 'gemini', 'mock')),
    base_url             text    NOT NULL CHECK (char_length(base_url) <= 2048),
    status               text    NOT NULL DEFAULT 'enabled'
                                 CHECK (status IN ('enabled', 'disabled', 'auto_disabled')),
    auto_ban             boolean NOT NULL DEFAULT false,
    max_concurrency      integer CHECK (max_concurrency > 0),
    capabilities         jsonb   NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(capabilities) = 'object'),
    retry_status_codes   integer[] NOT NULL DEFAULT '{}'
                                 CHECK (100 <= ALL (retry_status_codes) AND 599 >= ALL (retry_status_codes)),
    retry_error_patterns text[]  NOT NULL DEFAULT '{}',
    -- {"header-name": "value", ...}
    headers              jsonb   NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(headers) = 'object'),
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT channels_name_unique UNIQUE (name)
);

-- Upstream API keys of a channel: exactly one of an inline secret or an env-var name.
CREATE TABLE credentials (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel_id bigint  NOT NULL REFERENCES channels (id) ON DELETE CASCADE,
    secret     text    CHECK (char_length(secret) >= 1),
    secret_env text    CHECK (secret_env ~ '^[A-Za-z_][A-Za-z0-9_]*$'),
    enabled    boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT credentials_one_source CHECK ((secret IS NULL) <> (secret_env IS NULL))
);
CREATE INDEX credentials_channel_idx ON credentials (channel_id, id);

CREATE TABLE routes (
    id                       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    model_pattern            text    NOT NULL
                                     CHECK (char_length(model_pattern) BETWEEN 1 AND 256
                                            AND model_pattern = btrim(model_pattern)),
    enabled                  boolean NOT NULL DEFAULT true,
    routing_mode             text    NOT NULL DEFAULT 'auto'
                                     CHECK (routing_mode IN ('auto', 'weighted', 'latency', 'adaptive', 'single')),
    -- Only meaningful in `single` mode; a deleted member nulls it and the route behaves as `auto`
    -- (SPEC 2.10). Must be a member of this very route (composite FK below).
    single_member_id         bigint,
    sticky_session           boolean,
    stable_first             boolean,
    stable_first_denominator integer CHECK (stable_first_denominator BETWEEN 2 AND 1000),
    retry_times              integer CHECK (retry_times BETWEEN 0 AND 100),
    channel_retry_times      integer CHECK (channel_retry_times BETWEEN 0 AND 5),
    cooldown_seconds         integer CHECK (cooldown_seconds BETWEEN 0 AND 86400),
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT routes_model_pattern_unique UNIQUE (model_pattern)
);

CREATE TABLE route_members (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    route_id       bigint  NOT NULL REFERENCES routes (id) ON DELETE CASCADE,
    -- A channel that routes still use cannot be deleted (409): detach its members first.
    channel_id     bigint  NOT NULL REFERENCES channels (id) ON DELETE RESTRICT,
    upstream_model text    NOT NULL CHECK (char_length(upstream_model) BETWEEN 1 AND 256),
    group_name     text    NOT NULL DEFAULT 'default'
                           CHECK (char_length(group_name) BETWEEN 1 AND 64 AND group_name = btrim(group_name)),
    priority       integer NOT NULL DEFAULT 0,
    weight         integer NOT NULL DEFAULT 1 CHECK (weight >= 0),
    enabled        boolean NOT NULL DEFAULT true,
    canary         boolean NOT NULL DEFAULT false,
    capabilities   jsonb   NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(capabilities) = 'object'),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT route_members_id_route_unique UNIQUE (id, route_id)
);
-- The snapshot compiler reads members in (route, id) order.
CREATE INDEX route_members_route_idx ON route_members (route_id, id);
CREATE INDEX route_members_channel_idx ON route_members (channel_id);

ALTER TABLE routes
    ADD CONSTRAINT routes_single_member_fk
    FOREIGN KEY (single_member_id, id) REFERENCES route_members (id, route_id)
    ON DELETE SET NULL (single_member_id);

CREATE TABLE teams (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name             text    NOT NULL CHECK (char_length(name) BETWEEN 1 AND 128),
    retry_limit      integer CHECK (retry_limit BETWEEN 0 AND 100),
    disable_failover boolean NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT teams_name_unique UNIQUE (name)
);

-- Model patterns a team may call (an empty list allows no model).
CREATE TABLE team_models (
    team_id       bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    model_pattern text   NOT NULL CHECK (char_length(model_pattern) BETWEEN 1 AND 256),
    PRIMARY KEY (team_id, model_pattern)
);

-- Members a team may use (none listed: every member of an allowed model). RESTRICT: silently
-- dropping a grant would widen the team's access to every member, so deleting a granted member
-- is refused (409) until the team no longer lists it.
CREATE TABLE team_members (
    team_id   bigint NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    member_id bigint NOT NULL REFERENCES route_members (id) ON DELETE RESTRICT,
    PRIMARY KEY (team_id, member_id)
);
CREATE INDEX team_members_member_idx ON team_members (member_id);

-- Per-member priority/weight overrides of a team. Dropping one only restores the member's own
-- values, so these follow their member.
CREATE TABLE team_plans (
    team_id   bigint  NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    member_id bigint  NOT NULL REFERENCES route_members (id) ON DELETE CASCADE,
    priority  integer,
    weight    integer CHECK (weight >= 0),
    PRIMARY KEY (team_id, member_id)
);
CREATE INDEX team_plans_member_idx ON team_plans (member_id);

CREATE TABLE tokens (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name             text    NOT NULL CHECK (char_length(name) BETWEEN 1 AND 128),
    -- Lowercase hex SHA-256 of the plaintext; the plaintext is shown once and never stored.
    hash             text    NOT NULL CHECK (hash ~ '^[0-9a-f]{64}$'),
    -- First characters of the plaintext, to recognise a token in the console.
    prefix           text    NOT NULL,
    route_group_name text    CHECK (char_length(route_group_name) BETWEEN 1 AND 64
                                    AND route_group_name = btrim(route_group_name)),
    -- RESTRICT: a token losing its team would lose its restrictions.
    team_id          bigint  REFERENCES teams (id) ON DELETE RESTRICT,
    allow_pinning    boolean NOT NULL DEFAULT false,
    enabled          boolean NOT NULL DEFAULT true,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tokens_hash_unique UNIQUE (hash)
);
CREATE INDEX tokens_team_idx ON tokens (team_id);

-- Every status change of a channel, with its reason (SPEC 4).
CREATE TABLE channel_status_events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel_id  bigint NOT NULL REFERENCES channels (id) ON DELETE CASCADE,
    from_status text   CHECK (from_status IN ('enabled', 'disabled', 'auto_disabled')),
    to_status   text   NOT NULL CHECK (to_status IN ('enabled', 'disabled', 'auto_disabled')),
    reason      text   NOT NULL,
    actor       text   NOT NULL,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX channel_status_events_channel_idx ON channel_status_events (channel_id, id);

-- Who changed what, when, and which snapshot revision it produced. Details never hold secrets.
CREATE TABLE audit_log (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text   NOT NULL,
    action      text   NOT NULL CHECK (action IN ('create', 'update', 'delete')),
    resource    text   NOT NULL,
    resource_id bigint,
    revision    bigint NOT NULL,
    detail      jsonb  NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX audit_log_resource_idx ON audit_log (resource, resource_id);
