-- Usage accounting: proxies report per-minute aggregates (ReportUsage over gRPC); the control
-- plane adds them here. One row per (minute, token, team, route, channel, upstream model), never
-- one per request: a batch upserts with `ON CONFLICT DO UPDATE` adding its totals.
CREATE TABLE usage_minutes (
    -- Start of the minute the requests finished in (UTC).
    bucket        timestamptz NOT NULL CHECK (extract(second FROM bucket) = 0),
    -- Names, not ids: rows stay meaningful after a rename or a delete.
    token         text   NOT NULL CHECK (char_length(token) <= 256),
    -- '' for a token without a team.
    team          text   NOT NULL DEFAULT '' CHECK (char_length(team) <= 256),
    route         text   NOT NULL CHECK (char_length(route) <= 256),
    channel       text   NOT NULL CHECK (char_length(channel) <= 256),
    model         text   NOT NULL CHECK (char_length(model) <= 256),
    requests      bigint NOT NULL DEFAULT 0 CHECK (requests >= 0),
    input_tokens  bigint NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    output_tokens bigint NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    cached_tokens bigint NOT NULL DEFAULT 0 CHECK (cached_tokens >= 0),
    PRIMARY KEY (bucket, token, team, route, channel, model)
);

-- The batch ids already applied, so a proxy's retry of a batch whose acknowledgement it never
-- saw is recognised and not counted twice. Pruned after 7 days (a proxy retries for far less).
CREATE TABLE usage_batches (
    batch_id   text PRIMARY KEY CHECK (char_length(batch_id) BETWEEN 1 AND 128),
    applied_at timestamptz NOT NULL DEFAULT now(),
    records    integer NOT NULL CHECK (records >= 0)
);
CREATE INDEX usage_batches_applied_at_idx ON usage_batches (applied_at);
