-- Response cache accounting: requests answered from the cache are counted as requests (no
-- channel, no tokens, no cost) and carry what the answers they served had used and cost when
-- fresh, so usage reports show the hits and what they saved.
ALTER TABLE usage_minutes
    ADD COLUMN cache_hits          bigint NOT NULL DEFAULT 0 CHECK (cache_hits >= 0),
    ADD COLUMN saved_input_tokens  bigint NOT NULL DEFAULT 0 CHECK (saved_input_tokens >= 0),
    ADD COLUMN saved_output_tokens bigint NOT NULL DEFAULT 0 CHECK (saved_output_tokens >= 0),
    ADD COLUMN saved_cost_pico_usd bigint NOT NULL DEFAULT 0 CHECK (saved_cost_pico_usd >= 0);
