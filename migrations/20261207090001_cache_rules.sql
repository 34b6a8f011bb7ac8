-- Response cache rules: which requests the proxies answer from their exact response cache (the
-- engine's CacheRule; the ranges mirror its checks).
CREATE TABLE cache_rules (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name               text    NOT NULL UNIQUE CHECK (char_length(name) BETWEEN 1 AND 128),
    model_pattern      text    NOT NULL CHECK (char_length(model_pattern) BETWEEN 1 AND 256),
    -- chat_completions | completions | embeddings | messages | generate_content | responses
    endpoints          text[]  NOT NULL CHECK (cardinality(endpoints) BETWEEN 1 AND 6),
    ttl_seconds        bigint  NOT NULL CHECK (ttl_seconds BETWEEN 1 AND 2592000),
    max_entry_bytes    bigint  NOT NULL CHECK (max_entry_bytes BETWEEN 1 AND 8388608),
    scope              text    NOT NULL CHECK (scope IN ('route', 'team', 'token')),
    deterministic_only boolean NOT NULL DEFAULT false,
    enabled            boolean NOT NULL DEFAULT true,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);
