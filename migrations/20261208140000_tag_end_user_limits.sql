-- Limits on a tag or an end user.
--
-- A `tag` limit counts every request carrying its tag (`subject`); an `end_user` limit counts
-- one end user's requests (`subject`), or, without one, each end user's on a counter of its own.
-- Neither has a row to point at: their `scope_id` is 0, and no delete follows them.
ALTER TABLE limits DROP CONSTRAINT limits_scope_check;
ALTER TABLE limits ADD CONSTRAINT limits_scope_check CHECK (
    scope IN ('token', 'team', 'route', 'channel', 'member', 'tag', 'end_user')
);
ALTER TABLE limits
    ADD COLUMN subject text CHECK (char_length(subject) BETWEEN 1 AND 256),
    ADD CONSTRAINT limits_subject_scope CHECK (
        (scope = 'tag' AND scope_id = 0 AND subject ~ '^[A-Za-z0-9_.:/=-]{1,64}$')
        OR (scope = 'end_user' AND scope_id = 0)
        OR (scope NOT IN ('tag', 'end_user') AND subject IS NULL)
    );
-- A tag or end user limit may be narrowed to models and to a route, as a token's may.
ALTER TABLE limits DROP CONSTRAINT limits_narrowed_scope;
ALTER TABLE limits ADD CONSTRAINT limits_narrowed_scope CHECK (
    (model_pattern IS NULL OR scope IN ('token', 'team', 'route', 'tag', 'end_user'))
    AND (route_id IS NULL OR scope IN ('token', 'team', 'tag', 'end_user'))
);
-- One limit per scope, metric, window, narrowing and subject (no subject: each end user).
DROP INDEX limits_scope_metric_period_unique;
CREATE UNIQUE INDEX limits_scope_metric_period_unique ON limits
    (scope, scope_id, metric, period, coalesce(model_pattern, ''), coalesce(route_id, 0),
     coalesce(subject, ''));
