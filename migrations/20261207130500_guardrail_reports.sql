-- One row per (minute, guardrail): what the proxies report a guardrail checked and did (or, in
-- shadow mode, would have done). Counts, finding kinds and a few masked examples, never a text.
CREATE TABLE guardrail_minutes (
    bucket            timestamptz NOT NULL CHECK (extract(second FROM bucket) = 0),
    guardrail_id      bigint NOT NULL,
    checked           bigint NOT NULL DEFAULT 0 CHECK (checked >= 0),
    blocked           bigint NOT NULL DEFAULT 0 CHECK (blocked >= 0),
    would_block       bigint NOT NULL DEFAULT 0 CHECK (would_block >= 0),
    redacted          bigint NOT NULL DEFAULT 0 CHECK (redacted >= 0),
    would_redact      bigint NOT NULL DEFAULT 0 CHECK (would_redact >= 0),
    external_failures bigint NOT NULL DEFAULT 0 CHECK (external_failures >= 0),
    -- Finding kind -> count.
    findings          jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(findings) = 'object'),
    -- Masked examples, the first few kept.
    examples          text[] NOT NULL DEFAULT '{}' CHECK (cardinality(examples) <= 5),
    PRIMARY KEY (guardrail_id, bucket)
);
