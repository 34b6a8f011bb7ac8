-- Google Vertex AI channels: provider `vertex` speaks Gemini's protocol at Vertex's
-- project/location URLs; each credential is a service-account key (JSON) that the proxy
-- exchanges for OAuth access tokens.
--
-- Replaces the provider CHECK (named `channels_provider_check`, see the azure migration) by one
-- that also admits 'vertex'.
ALTER TABLE channels DROP CONSTRAINT channels_provider_check;
ALTER TABLE channels ADD CONSTRAINT channels_provider_check
    CHECK (provider IN ('openai', 'azure', 'anthropic', 'gemini', 'vertex', 'mock'));
