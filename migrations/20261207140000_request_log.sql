-- The request log: one row per finished request the proxies report (metadata only, never a
-- body), partitioned by the UTC day the request arrived. The control plane makes each day's
-- partition ahead of time (request_log_partition) and drops whole partitions past the retention;
-- rows are never deleted one by one. A row is identified by its arrival time and request id, so a
-- report sent twice adds it once.
CREATE TABLE request_log (
    at             timestamptz NOT NULL,
    request_id     text        NOT NULL,
    trace_id       text        NOT NULL DEFAULT '',
    token_id       bigint      NOT NULL DEFAULT 0,
    token          text        NOT NULL DEFAULT '',
    team           text        NOT NULL DEFAULT '',
    route          text        NOT NULL DEFAULT '',
    endpoint       text        NOT NULL DEFAULT '',
    model          text        NOT NULL DEFAULT '',
    served_model   text        NOT NULL DEFAULT '',
    channel        text        NOT NULL DEFAULT '',
    attempts       integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    status         smallint    NOT NULL CHECK (status BETWEEN 100 AND 599),
    error_code     text        NOT NULL DEFAULT '',
    latency_ms     bigint      NOT NULL DEFAULT 0 CHECK (latency_ms >= 0),
    first_token_ms bigint               CHECK (first_token_ms >= 0),
    input_tokens   bigint      NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    output_tokens  bigint      NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    cached_tokens  bigint      NOT NULL DEFAULT 0 CHECK (cached_tokens >= 0),
    -- Pico-USD; NULL: no price matched (unpriced).
    cost_pico_usd  bigint               CHECK (cost_pico_usd >= 0),
    -- hit | miss | bypass, '' when no cache rule covered the request.
    cache          text        NOT NULL DEFAULT '',
    tags           text[]      NOT NULL DEFAULT '{}',
    end_user       text        NOT NULL DEFAULT '',
    PRIMARY KEY (at, request_id)
) PARTITION BY RANGE (at);

-- The filters a reader uses most besides time (the primary key serves time and paging).
CREATE INDEX request_log_token_at ON request_log (token, at);
CREATE INDEX request_log_end_user_at ON request_log (end_user, at) WHERE end_user <> '';
CREATE INDEX request_log_tags ON request_log USING gin (tags);

-- The partition of `day` (named request_log_YYYYMMDD), made when missing; returns its name. Two
-- callers making it at once are fine: the loser finds it made.
CREATE FUNCTION request_log_partition(day date) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    name text := 'request_log_' || to_char(day, 'YYYYMMDD');
BEGIN
    IF to_regclass(name) IS NULL THEN
        BEGIN
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF request_log FOR VALUES FROM (%L) TO (%L)',
                name,
                (day::timestamp AT TIME ZONE 'UTC'),
                ((day + 1)::timestamp AT TIME ZONE 'UTC'));
        EXCEPTION WHEN duplicate_table OR unique_violation THEN
            NULL;
        END;
    END IF;
    RETURN name;
END
$$;
