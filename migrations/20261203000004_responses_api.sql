-- Channels whose OpenAI-compatible upstream has no Responses API (`/v1/responses`): vLLM,
-- Ollama, LiteLLM, older Azure deployments and the like. `responses_api = false` makes the
-- proxy translate Responses requests for such a channel into Chat Completions. Only `openai`
-- and `azure` channels can be without it.
ALTER TABLE channels ADD COLUMN responses_api boolean NOT NULL DEFAULT true;
ALTER TABLE channels ADD CONSTRAINT channels_responses_api_check
    CHECK (responses_api OR provider IN ('openai', 'azure'));
