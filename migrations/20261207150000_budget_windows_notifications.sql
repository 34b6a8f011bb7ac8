-- Budget windows, narrowed limits and notifications.

-- Windows: the ISO week (from Monday 00:00 UTC) and rolling windows of the last N UTC days
-- (`2d` to `90d`, counted in day buckets), beside the calendar ones.
ALTER TABLE limits DROP CONSTRAINT limits_period_check;
ALTER TABLE limits ADD CONSTRAINT limits_period_check CHECK (
    period IN ('none', 'minute', 'hour', 'day', 'week', 'month')
    OR period ~ '^([2-9]|[1-8][0-9]|90)d$'
);

-- A limit may be narrowed to requests for models matching a pattern (a token, team or route
-- limit) and to requests through one route (a token or team limit); a narrowed limit counts
-- on a counter of its own. Deleting the route deletes the limits narrowed to it.
ALTER TABLE limits
    ADD COLUMN model_pattern text CHECK (char_length(model_pattern) BETWEEN 1 AND 256),
    ADD COLUMN route_id bigint REFERENCES routes (id) ON DELETE CASCADE,
    ADD CONSTRAINT limits_narrowed_scope CHECK (
        (model_pattern IS NULL OR scope IN ('token', 'team', 'route'))
        AND (route_id IS NULL OR scope IN ('token', 'team'))
    );
-- One limit per scope, metric, window and narrowing (the name the API's duplicate check knows).
ALTER TABLE limits DROP CONSTRAINT limits_scope_metric_period_unique;
CREATE UNIQUE INDEX limits_scope_metric_period_unique ON limits
    (scope, scope_id, metric, period, coalesce(model_pattern, ''), coalesce(route_id, 0));
CREATE INDEX limits_route_idx ON limits (route_id) WHERE route_id IS NOT NULL;

-- Where notifications go. `secret` signs every delivery (HMAC-SHA256); it is write-only: no
-- read returns it. `thresholds`: the budget percentages this target hears about.
CREATE TABLE webhooks (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text    NOT NULL UNIQUE CHECK (char_length(name) BETWEEN 1 AND 128),
    url        text    NOT NULL CHECK (char_length(url) BETWEEN 1 AND 2048),
    kind       text    NOT NULL CHECK (kind IN ('json', 'slack')),
    events     text[]  NOT NULL CHECK (cardinality(events) BETWEEN 1 AND 8),
    thresholds integer[] NOT NULL DEFAULT '{50,80,100}'
                       CHECK (cardinality(thresholds) BETWEEN 1 AND 10),
    secret     text    NOT NULL CHECK (char_length(secret) BETWEEN 16 AND 256),
    enabled    boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Every event, once: `key` names it (a budget's window and threshold, a limit's refusing
-- window, a channel status change), so whoever records it second records nothing.
CREATE TABLE notification_events (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key     text  NOT NULL UNIQUE CHECK (char_length(key) BETWEEN 1 AND 256),
    event   text  NOT NULL CHECK (event IN ('budget_threshold', 'limit_refusing',
                                            'channel_auto_disabled', 'channel_recovered')),
    payload jsonb NOT NULL,
    at      timestamptz NOT NULL DEFAULT now()
);

-- One delivery of an event to a webhook. A sender takes due rows with FOR UPDATE SKIP LOCKED,
-- so two control planes never send the same one; `failed` after the last attempt.
CREATE TABLE notification_deliveries (
    event_id     bigint  NOT NULL REFERENCES notification_events (id) ON DELETE CASCADE,
    webhook_id   bigint  NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    state        text    NOT NULL DEFAULT 'pending'
                         CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts     integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_at      timestamptz NOT NULL DEFAULT now(),
    last_error   text,
    delivered_at timestamptz,
    PRIMARY KEY (event_id, webhook_id)
);
CREATE INDEX notification_deliveries_due_idx ON notification_deliveries (next_at)
    WHERE state = 'pending';
