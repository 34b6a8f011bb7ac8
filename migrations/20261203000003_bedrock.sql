-- AWS Bedrock channels: provider `bedrock` speaks the Bedrock Runtime Converse API (the
-- proxy converts Anthropic's Messages to it); each credential is an AWS access key (JSON) that
-- the proxy signs every request with (Signature Version 4).
--
-- Replaces the provider CHECK (named `channels_provider_check`, see the azure migration) by one
-- that also admits 'bedrock'.
ALTER TABLE channels DROP CONSTRAINT channels_provider_check;
ALTER TABLE channels ADD CONSTRAINT channels_provider_check
    CHECK (provider IN ('openai', 'azure', 'anthropic', 'gemini', 'vertex', 'bedrock', 'mock'));
