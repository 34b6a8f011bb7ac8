-- Azure OpenAI channels: provider `azure` speaks OpenAI's protocol at Azure's URLs (the member's
-- upstream model is the deployment) with an `api-key` header.
--
-- The provider CHECK of the first migration was declared inline, so Postgres named it
-- `channels_provider_check`; it is replaced by one that also admits 'azure'.
ALTER TABLE channels DROP CONSTRAINT channels_provider_check;
ALTER TABLE channels ADD CONSTRAINT channels_provider_check
    CHECK (provider IN ('openai', 'azure', 'anthropic', 'gemini', 'mock'));
