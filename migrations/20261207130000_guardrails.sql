-- Guardrail rules: checks on what requests send upstream and what answers bring back (the
-- engine's Guardrail; the checks are the JSON object the admin API takes, validated by the
-- engine's own check before every write).
CREATE TABLE guardrails (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text    NOT NULL UNIQUE CHECK (char_length(name) BETWEEN 1 AND 128),
    -- all: every request; route | team | token: the one with id scope_id.
    scope      text    NOT NULL CHECK (scope IN ('all', 'route', 'team', 'token')),
    scope_id   bigint,
    stage      text    NOT NULL CHECK (stage IN ('request', 'response', 'both')),
    action     text    NOT NULL CHECK (action IN ('block', 'redact', 'log')),
    restore    boolean NOT NULL DEFAULT false,
    mode       text    NOT NULL DEFAULT 'enforce' CHECK (mode IN ('enforce', 'shadow')),
    enabled    boolean NOT NULL DEFAULT true,
    checks     jsonb   NOT NULL CHECK (jsonb_typeof(checks) = 'object'),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((scope = 'all') = (scope_id IS NULL))
);

-- A guardrail follows what it is attached to: deleting the route, team or token deletes it.
CREATE FUNCTION guardrails_follow_scope() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM guardrails WHERE scope = TG_ARGV[0] AND scope_id = OLD.id;
    RETURN OLD;
END;
$$;
CREATE TRIGGER tokens_guardrails AFTER DELETE ON tokens
    FOR EACH ROW EXECUTE FUNCTION guardrails_follow_scope('token');
CREATE TRIGGER teams_guardrails AFTER DELETE ON teams
    FOR EACH ROW EXECUTE FUNCTION guardrails_follow_scope('team');
CREATE TRIGGER routes_guardrails AFTER DELETE ON routes
    FOR EACH ROW EXECUTE FUNCTION guardrails_follow_scope('route');
