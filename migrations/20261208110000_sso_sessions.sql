-- Console sessions of people signed in through single sign-on. Only the SHA-256 of the session
-- secret is stored (the browser holds the secret in an HttpOnly cookie). The role and team are
-- the ones the person's groups granted at sign-in; a session of a deleted team goes with it.
CREATE TABLE sso_sessions (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hash         text        NOT NULL CHECK (hash ~ '^[0-9a-f]{64}$'),
    subject      text        NOT NULL CHECK (char_length(subject) BETWEEN 1 AND 255),
    name         text        NOT NULL CHECK (char_length(name) BETWEEN 1 AND 320),
    role         text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    team_id      bigint      REFERENCES teams (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    CONSTRAINT sso_sessions_hash_unique UNIQUE (hash)
);

CREATE INDEX sso_sessions_expires_at ON sso_sessions (expires_at);
