-- Shadow traffic: rules that copy a sample of live requests to another target after the
-- client's answer is complete, and the per-minute comparison of the pairs the proxies report.

CREATE TABLE shadows (
    id                        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                      text   NOT NULL UNIQUE CHECK (char_length(name) BETWEEN 1 AND 128),
    -- Matched against the model the client asked for, like a route pattern.
    model_pattern             text   NOT NULL CHECK (char_length(model_pattern) BETWEEN 1 AND 256),
    -- The target: a member, or a channel and upstream model (exactly one of the two).
    target_member_id          bigint REFERENCES route_members (id) ON DELETE CASCADE,
    target_channel_id         bigint REFERENCES channels (id) ON DELETE CASCADE,
    target_model              text   CHECK (char_length(target_model) BETWEEN 1 AND 256),
    -- Hundredths of a percent of the matching requests.
    sample_basis_points       integer NOT NULL CHECK (sample_basis_points BETWEEN 1 AND 10000),
    max_rps                   integer NOT NULL CHECK (max_rps BETWEEN 1 AND 100000),
    -- Micro-USD per UTC day; NULL: no cap.
    max_daily_spend_micros    bigint CHECK (max_daily_spend_micros BETWEEN 0 AND 1000000000000000),
    expires_at                timestamptz,
    -- Per mille; NULL: no error-rate stop.
    error_rate_stop_per_mille integer CHECK (error_rate_stop_per_mille BETWEEN 1 AND 1000),
    error_rate_min_sample     integer NOT NULL DEFAULT 20 CHECK (error_rate_min_sample BETWEEN 1 AND 1000000),
    enabled                   boolean NOT NULL DEFAULT true,
    -- Why the rule stopped by itself (NULL: it has not).
    stopped_reason            text CHECK (stopped_reason IN ('expired', 'spend_cap', 'error_rate')),
    stopped_at                timestamptz,
    created_at                timestamptz NOT NULL DEFAULT now(),
    updated_at                timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT shadows_one_target CHECK (
        (target_member_id IS NOT NULL AND target_channel_id IS NULL AND target_model IS NULL)
        OR (target_member_id IS NULL AND target_channel_id IS NOT NULL AND target_model IS NOT NULL))
);

-- One row per (minute, rule): counts and sums of the compared pairs, never a body. Latency
-- histograms are arrays of counts per bucket of the proxies' fixed bounds (added element-wise).
CREATE TABLE shadow_minutes (
    bucket                    timestamptz NOT NULL CHECK (extract(second FROM bucket) = 0),
    shadow_id                 bigint NOT NULL,
    pairs                     bigint NOT NULL DEFAULT 0 CHECK (pairs >= 0),
    live_ok                   bigint NOT NULL DEFAULT 0,
    shadow_ok                 bigint NOT NULL DEFAULT 0,
    live_total_ms_hist        bigint[] NOT NULL DEFAULT '{}',
    live_first_byte_ms_hist   bigint[] NOT NULL DEFAULT '{}',
    shadow_total_ms_hist      bigint[] NOT NULL DEFAULT '{}',
    shadow_first_byte_ms_hist bigint[] NOT NULL DEFAULT '{}',
    live_input_tokens         bigint NOT NULL DEFAULT 0,
    live_output_tokens        bigint NOT NULL DEFAULT 0,
    shadow_input_tokens       bigint NOT NULL DEFAULT 0,
    shadow_output_tokens      bigint NOT NULL DEFAULT 0,
    live_cost_pico_usd        bigint NOT NULL DEFAULT 0,
    shadow_cost_pico_usd      bigint NOT NULL DEFAULT 0,
    live_unpriced             bigint NOT NULL DEFAULT 0,
    shadow_unpriced           bigint NOT NULL DEFAULT 0,
    compared                  bigint NOT NULL DEFAULT 0,
    same_finish_reason        bigint NOT NULL DEFAULT 0,
    same_tool_names           bigint NOT NULL DEFAULT 0,
    shadow_tool_args_valid    bigint NOT NULL DEFAULT 0,
    json_mode_asked           bigint NOT NULL DEFAULT 0,
    shadow_json_valid         bigint NOT NULL DEFAULT 0,
    length_ratio_milli_sum    bigint NOT NULL DEFAULT 0,
    similarity_milli_sum      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (shadow_id, bucket)
);

-- Element-wise sum of two latency histograms (the longer one's extra buckets kept).
CREATE FUNCTION shadow_hist_add(a bigint[], b bigint[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(array_agg(coalesce(x, 0) + coalesce(y, 0) ORDER BY n), '{}')
    FROM unnest(a, b) WITH ORDINALITY AS t(x, y, n)
$$;
