-- Team admins: an admin token may be limited to one team. Such a token administers that team's
-- downstream tokens, limits, budgets and cache rules and reads its usage and request log, and
-- nothing else. NULL: the whole fleet.
--
-- Deleting a team removes its admin tokens (CASCADE): a token limited to a team that no longer
-- exists must never outlive it, let alone become a fleet token. The audit log keeps their names
-- (its actor is text) and the team's delete row lists them.
ALTER TABLE admin_tokens
    ADD COLUMN team_id bigint REFERENCES teams (id) ON DELETE CASCADE;
CREATE INDEX admin_tokens_team_idx ON admin_tokens (team_id) WHERE team_id IS NOT NULL;

-- The team of the admin whose write an audit row records (NULL: a fleet admin or the control
-- plane itself). No foreign key: the row outlives the team.
ALTER TABLE audit_log ADD COLUMN actor_team_id bigint;
CREATE INDEX audit_log_actor_team_idx ON audit_log (actor_team_id, id)
    WHERE actor_team_id IS NOT NULL;

-- A cache rule may be limited to one team: it covers only requests of that team's tokens, and
-- that team's admins manage it. NULL: every caller (a fleet rule). A rule follows its team.
ALTER TABLE cache_rules
    ADD COLUMN team_id bigint REFERENCES teams (id) ON DELETE CASCADE;
