//! What a simulated model answers, independent of the protocol it is said in ([`Answer`],
//! [`ToolCall`]), and how its tokens are counted.

use serde_json::{json, Value};

/// The assistant text of every default answer.
pub const DEFAULT_CONTENT: &str = "Hello from mock";
/// The model echoed when a request names none.
pub const DEFAULT_MODEL: &str = "mock-model";

/// One tool (function) call the simulated model makes. `arguments` is the JSON text of the call's
/// arguments, the way OpenAI carries it; Anthropic (`input`) and Gemini (`args`) carry the parsed
/// object, which is `{}` when `arguments` is not a JSON object.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolCall {
    pub name: String,
    pub arguments: String,
}

impl ToolCall {
    pub fn new(name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// The arguments as a JSON object (`{}` when they are not one).
    pub fn arguments_object(&self) -> Value {
        match serde_json::from_str::<Value>(&self.arguments) {
            Ok(v @ Value::Object(_)) => v,
            _ => json!({}),
        }
    }
}

/// What a simulated model answers, independent of the protocol it is said in: optional text,
/// then zero or more tool calls, and the usage to report.
///
/// An answer with no text and no tool calls is an *empty completion*, said in each protocol's
/// own empty shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub model: String,
    /// Assistant text, before any tool call (may be empty).
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    /// Prompt tokens, cached ones included (raised to `cached_tokens` when lower).
    pub prompt_tokens: u64,
    /// Prompt tokens served from the provider's prompt cache.
    pub cached_tokens: u64,
}

impl Answer {
    /// A text answer with 1 prompt token and no cache use.
    pub fn new(model: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            text: text.into(),
            tool_calls: Vec::new(),
            prompt_tokens: 1,
            cached_tokens: 0,
        }
    }

    /// Adds a tool call after the text and the calls already there.
    pub fn tool_call(mut self, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        self.tool_calls.push(ToolCall::new(name, arguments));
        self
    }

    pub fn prompt_tokens(mut self, n: u64) -> Self {
        self.prompt_tokens = n;
        self
    }

    pub fn cached_tokens(mut self, n: u64) -> Self {
        self.cached_tokens = n;
        self
    }

    /// Prompt tokens in all, never fewer than the cached ones.
    pub fn input_tokens(&self) -> u64 {
        self.prompt_tokens.max(self.cached_tokens)
    }

    /// Estimated output tokens: the text plus each call's name and arguments.
    pub fn output_tokens(&self) -> u64 {
        estimate_tokens(&self.text)
            + self
                .tool_calls
                .iter()
                .map(|c| estimate_tokens(&c.name) + estimate_tokens(&c.arguments))
                .sum::<u64>()
    }

    /// No text and no tool call.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty() && self.tool_calls.is_empty()
    }

    /// Why the answer stopped, in a protocol's words: `on_calls` when it calls a tool, else
    /// `on_end`.
    pub(crate) fn stop_word(&self, on_end: &'static str, on_calls: &'static str) -> &'static str {
        if self.tool_calls.is_empty() {
            on_end
        } else {
            on_calls
        }
    }
}

/// A rough token count (4 characters a token, at least 1 for non-empty text), good enough for
/// plausible `usage` blocks.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_usage_counts_calls_and_keeps_cached_within_prompt() {
        let a = Answer::new("m", "")
            .tool_call("f", r#"{"a":1}"#)
            .prompt_tokens(2)
            .cached_tokens(10);
        assert_eq!(a.input_tokens(), 10);
        assert!(a.output_tokens() >= 2);
        assert!(!a.is_empty());
        assert!(Answer::new("m", "").is_empty());
        assert_eq!(a.tool_calls[0].arguments_object(), json!({"a": 1}));
        assert_eq!(ToolCall::new("f", "nope").arguments_object(), json!({}));
    }

    #[test]
    fn token_estimates_are_four_characters_a_token_rounded_up() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("a"), 1);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        // Characters, not bytes: four two-byte characters are one token.
        assert_eq!(estimate_tokens("éééé"), 1);
        // "one two three" is 4 tokens, "f" 1, `{"a":1}` 2.
        let a = Answer::new("m", "one two three")
            .tool_call("f", r#"{"a":1}"#)
            .tool_call("f", r#"{"a":1}"#);
        assert_eq!(a.output_tokens(), 4 + 2 * (1 + 2));
        assert_eq!(Answer::new("m", "").output_tokens(), 0);
    }

    #[test]
    fn input_tokens_are_the_prompt_never_below_the_cached() {
        assert_eq!(Answer::new("m", "x").input_tokens(), 1);
        assert_eq!(Answer::new("m", "x").prompt_tokens(9).input_tokens(), 9);
        assert_eq!(
            Answer::new("m", "x")
                .prompt_tokens(9)
                .cached_tokens(4)
                .input_tokens(),
            9
        );
        assert_eq!(
            Answer::new("m", "x")
                .prompt_tokens(2)
                .cached_tokens(4)
                .input_tokens(),
            4
        );
    }

    #[test]
    fn the_stop_word_names_tool_calls_only_when_there_are_some() {
        assert_eq!(Answer::new("m", "x").stop_word("stop", "calls"), "stop");
        assert_eq!(
            Answer::new("m", "")
                .tool_call("f", "{}")
                .stop_word("stop", "calls"),
            "calls"
        );
        assert!(!Answer::new("m", "x").is_empty());
    }
}
