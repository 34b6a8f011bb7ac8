-- Provider presets: a channel may be created from a named preset (`groq`, `ollama`, ...) that
-- supplies its provider, default base URL and quirks. The name is kept as given: it says which
-- built-in catalog prices apply to the channel's usage, and an export writes it back. NULL: the
-- channel was configured field by field.
ALTER TABLE channels ADD COLUMN preset text
    CONSTRAINT channels_preset_length CHECK (char_length(preset) BETWEEN 1 AND 64);
