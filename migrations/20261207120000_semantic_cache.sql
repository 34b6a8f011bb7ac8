-- The semantic response cache: a cache rule's match by meaning (the engine's SemanticPart; the
-- ranges mirror its checks) and each rule's trial counters per minute.
--
-- The part is present when semantic_channel_id is set. Deleting the channel takes the part away
-- (the exact cache of the rule stays).
ALTER TABLE cache_rules
    ADD COLUMN semantic_channel_id bigint REFERENCES channels (id) ON DELETE SET NULL,
    ADD COLUMN semantic_model      text CHECK (char_length(semantic_model) BETWEEN 1 AND 256),
    ADD COLUMN semantic_threshold  double precision
        CHECK (semantic_threshold > 0 AND semantic_threshold <= 1),
    ADD COLUMN semantic_mode       text CHECK (semantic_mode IN ('trial', 'serve'));

-- What the proxies report of a rule's semantic lookups, summed per minute (their usage batches
-- carry it, so each report is applied once).
CREATE TABLE semantic_trial_minutes (
    cache_rule_id        bigint      NOT NULL REFERENCES cache_rules (id) ON DELETE CASCADE,
    bucket               timestamptz NOT NULL,
    looked_up            bigint      NOT NULL DEFAULT 0 CHECK (looked_up >= 0),
    would_hit            bigint      NOT NULL DEFAULT 0 CHECK (would_hit >= 0),
    compared             bigint      NOT NULL DEFAULT 0 CHECK (compared >= 0),
    agreed               bigint      NOT NULL DEFAULT 0 CHECK (agreed >= 0),
    score_milli_sum      bigint      NOT NULL DEFAULT 0 CHECK (score_milli_sum >= 0),
    similarity_milli_sum bigint      NOT NULL DEFAULT 0 CHECK (similarity_milli_sum >= 0),
    PRIMARY KEY (cache_rule_id, bucket)
);
