-- How a channel authenticates upstream: with its stored credentials (`credentials`, every
-- channel so far), or with the proxies' own workload identity (`workload`: azure, bedrock and
-- vertex channels only, with no stored credential; the compiled snapshot gives such a channel
-- one credential whose source is the workload identity).
ALTER TABLE channels
    ADD COLUMN auth text NOT NULL DEFAULT 'credentials'
        CHECK (auth IN ('credentials', 'workload')),
    ADD CONSTRAINT channels_workload_provider
        CHECK (auth = 'credentials' OR provider IN ('azure', 'bedrock', 'vertex'));
