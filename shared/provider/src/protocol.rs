//! The three wire protocols the gateway speaks.

use std::fmt;

/// A chat wire protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// OpenAI Chat Completions (`POST /v1/chat/completions`).
    OpenAi,
    /// Anthropic Messages (`POST /v1/messages`).
    Anthropic,
    /// Gemini native `generateContent` / `streamGenerateContent`.
    Gemini,
}

impl Protocol {
    /// Every protocol, in a fixed order.
    pub const ALL: [Protocol; 3] = [Protocol::OpenAi, Protocol::Anthropic, Protocol::Gemini];

    /// `"openai"`, `"anthropic"` or `"gemini"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::OpenAi => "openai",
            Protocol::Anthropic => "anthropic",
            Protocol::Gemini => "gemini",
        }
    }

    /// The inverse of [`Protocol::as_str`].
    pub fn from_name(name: &str) -> Option<Protocol> {
        Protocol::ALL.into_iter().find(|p| p.as_str() == name)
    }

    pub(crate) fn idx(self) -> usize {
        match self {
            Protocol::OpenAi => 0,
            Protocol::Anthropic => 1,
            Protocol::Gemini => 2,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in Protocol::ALL {
            assert_eq!(Protocol::from_name(p.as_str()), Some(p));
        }
        assert_eq!(Protocol::from_name("cohere"), None);
    }

    #[test]
    fn a_protocol_displays_as_its_name() {
        let shown: Vec<String> = Protocol::ALL.iter().map(|p| p.to_string()).collect();
        assert_eq!(shown, ["openai", "anthropic", "gemini"]);
    }
}
