//! Why a body could not be translated: the one error type of parsing and translation.

use std::fmt;

/// Why a body could not be translated.
#[derive(Debug, Clone, PartialEq)]
pub enum TranslateError {
    /// The body is not a valid request/response of its protocol.
    Malformed(String),
    /// The body uses a feature the target protocol cannot express (the feature is named).
    Unsupported(String),
}

impl fmt::Display for TranslateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TranslateError::Malformed(m) => write!(f, "malformed body: {m}"),
            TranslateError::Unsupported(m) => write!(f, "unsupported by the target protocol: {m}"),
        }
    }
}

impl std::error::Error for TranslateError {}

pub(crate) fn malformed(msg: impl Into<String>) -> TranslateError {
    TranslateError::Malformed(msg.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_says_what_it_is_and_names_the_cause() {
        assert_eq!(
            malformed("`messages` must be an array").to_string(),
            "malformed body: `messages` must be an array"
        );
        assert_eq!(
            TranslateError::Unsupported("logprobs".into()).to_string(),
            "unsupported by the target protocol: logprobs"
        );
    }
}
