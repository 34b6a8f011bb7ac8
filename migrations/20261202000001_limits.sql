-- Limits, budgets and prices.

-- A token may expire: after this instant it is refused (401) as expired.
ALTER TABLE tokens ADD COLUMN expires_at timestamptz;

-- A price per (channel, upstream model pattern). Amounts are micro-USD per million tokens (USD
-- per million times 10^6), exact integers: six decimals of the figure an operator types.
CREATE TABLE prices (
    id                       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel_id               bigint NOT NULL REFERENCES channels (id) ON DELETE CASCADE,
    model_pattern            text   NOT NULL CHECK (char_length(model_pattern) BETWEEN 1 AND 256),
    input_per_million        bigint NOT NULL CHECK (input_per_million BETWEEN 0 AND 1000000000000000),
    output_per_million       bigint NOT NULL CHECK (output_per_million BETWEEN 0 AND 1000000000000000),
    -- NULL: cache-read input tokens are charged as other input.
    cached_input_per_million bigint CHECK (cached_input_per_million BETWEEN 0 AND 1000000000000000),
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT prices_channel_pattern_unique UNIQUE (channel_id, model_pattern)
);

-- A limit on a token, team, route, channel or member. `value` counts requests, tokens or
-- concurrent requests, or micro-USD for spend. `period` is the counting window ('none' for
-- concurrent; the API calls it `window`, a reserved word in SQL).
CREATE TABLE limits (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope      text   NOT NULL CHECK (scope IN ('token', 'team', 'route', 'channel', 'member')),
    scope_id   bigint NOT NULL,
    metric     text   NOT NULL CHECK (metric IN ('requests', 'tokens', 'concurrent', 'spend')),
    period     text   NOT NULL CHECK (period IN ('none', 'minute', 'hour', 'day', 'month')),
    value      bigint NOT NULL CHECK (value BETWEEN 1 AND 1000000000000000),
    mode       text   NOT NULL CHECK (mode IN ('hard', 'soft')),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT limits_scope_metric_period_unique UNIQUE (scope, scope_id, metric, period)
);

-- A limit follows its scope: deleting the token, team, route, channel or member deletes it.
CREATE FUNCTION limits_follow_scope() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM limits WHERE scope = TG_ARGV[0] AND scope_id = OLD.id;
    RETURN OLD;
END;
$$;
CREATE TRIGGER tokens_limits AFTER DELETE ON tokens
    FOR EACH ROW EXECUTE FUNCTION limits_follow_scope('token');
CREATE TRIGGER teams_limits AFTER DELETE ON teams
    FOR EACH ROW EXECUTE FUNCTION limits_follow_scope('team');
CREATE TRIGGER routes_limits AFTER DELETE ON routes
    FOR EACH ROW EXECUTE FUNCTION limits_follow_scope('route');
CREATE TRIGGER channels_limits AFTER DELETE ON channels
    FOR EACH ROW EXECUTE FUNCTION limits_follow_scope('channel');
CREATE TRIGGER route_members_limits AFTER DELETE ON route_members
    FOR EACH ROW EXECUTE FUNCTION limits_follow_scope('member');

-- Cost of the priced requests of a usage row, in pico-USD (10^-12 USD), and how many requests
-- of the row matched no price (their cost is unknown: never counted as zero).
ALTER TABLE usage_minutes
    ADD COLUMN cost_pico_usd     bigint NOT NULL DEFAULT 0 CHECK (cost_pico_usd >= 0),
    ADD COLUMN unpriced_requests bigint NOT NULL DEFAULT 0 CHECK (unpriced_requests >= 0);
