-- Named admin API tokens, each with a role (viewer < operator < admin). Only the SHA-256
-- (lowercase hex) of the secret is stored; the secret is shown once, by the create call.
-- Revoking sets `revoked_at` (the row stays, so the audit log's names keep their meaning); a
-- revoked or expired token is refused on its next request.
CREATE TABLE admin_tokens (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text        NOT NULL,
    role         text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    hash         text        NOT NULL UNIQUE,
    prefix       text        NOT NULL,
    expires_at   timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    created_by   text        NOT NULL,
    last_used_at timestamptz,
    revoked_at   timestamptz
);
-- A name names one live token: the audit log must say who without ambiguity.
CREATE UNIQUE INDEX admin_tokens_name_unique ON admin_tokens (name) WHERE revoked_at IS NULL;
