-- What a guardrail does with content it cannot inspect (pass-through, Files and Batch API calls,
-- Realtime sessions, audio to transcribe): allow lets it through unchecked, block refuses it.
ALTER TABLE guardrails
    ADD COLUMN uninspectable text NOT NULL DEFAULT 'allow'
        CHECK (uninspectable IN ('allow', 'block'));
