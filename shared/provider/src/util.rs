//! Small JSON and string helpers.

use serde_json::{Map, Value};

use crate::error::TranslateError;

pub(crate) fn parse_json(body: &[u8]) -> Result<Value, TranslateError> {
    serde_json::from_slice(body)
        .map_err(|e| TranslateError::Malformed(format!("invalid JSON: {e}")))
}

pub(crate) fn parse_json_lenient(body: &[u8]) -> Option<Value> {
    serde_json::from_slice(body).ok()
}

pub(crate) fn parse_object(body: &[u8]) -> Result<Map<String, Value>, TranslateError> {
    match parse_json(body)? {
        Value::Object(m) => Ok(m),
        _ => Err(TranslateError::Malformed(
            "body is not a JSON object".into(),
        )),
    }
}

/// What the getters below read from: a JSON value, or a request body's map of fields.
pub(crate) trait Fields {
    fn field(&self, key: &str) -> Option<&Value>;
}

impl Fields for Value {
    fn field(&self, key: &str) -> Option<&Value> {
        self.get(key)
    }
}

impl Fields for Map<String, Value> {
    fn field(&self, key: &str) -> Option<&Value> {
        self.get(key)
    }
}

pub(crate) fn get_str<'a, T: Fields + ?Sized>(v: &'a T, key: &str) -> Option<&'a str> {
    v.field(key).and_then(Value::as_str)
}

/// A count: an unsigned integer, or a non-negative number (its fraction dropped).
pub(crate) fn get_u64<T: Fields + ?Sized>(v: &T, key: &str) -> Option<u64> {
    v.field(key).and_then(|n| {
        n.as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
    })
}

pub(crate) fn get_f64<T: Fields + ?Sized>(v: &T, key: &str) -> Option<f64> {
    v.field(key).and_then(Value::as_f64)
}

pub(crate) fn get_array<'a, T: Fields + ?Sized>(v: &'a T, key: &str) -> Option<&'a Vec<Value>> {
    v.field(key).and_then(Value::as_array)
}

/// At most `max` characters of `s` (cut at a char boundary, with an ellipsis when cut).
pub(crate) fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((i, _)) => format!("{}…", &s[..i]),
    }
}

/// FNV-1a over the parts (separated), for stable synthesized ids.
pub(crate) fn stable_hash(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0xff)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// A tool-call id synthesized for Gemini function calls that carry none. Stable: the same
/// inputs always give the same id, so a conversation re-sent next turn keeps its ids.
pub(crate) fn synth_call_id(parts: &[&str]) -> String {
    format!("call_{:016x}", stable_hash(parts))
}

/// Anthropic tool ids must match `^[a-zA-Z0-9_-]+$`; other characters become `_`.
pub(crate) fn anthropic_tool_id(id: &str) -> String {
    if id.is_empty() {
        return "toolu_empty".into();
    }
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Text of a JSON value: strings as-is, anything else serialized.
pub(crate) fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_cuts_at_char_boundary() {
        assert_eq!(truncate("héllo", 2), "hé…");
        assert_eq!(truncate("abc", 3), "abc");
    }

    #[test]
    fn synthesized_ids_are_stable_and_distinct() {
        assert_eq!(synth_call_id(&["a", "b"]), synth_call_id(&["a", "b"]));
        assert_ne!(synth_call_id(&["ab", ""]), synth_call_id(&["a", "b"]));
    }

    #[test]
    fn a_count_is_a_whole_non_negative_number() {
        let v =
            serde_json::json!({"n": 7, "f": 3.7, "zero": 0.0, "neg": -1.0, "negi": -2, "s": "7"});
        let counts: Vec<Option<u64>> = ["n", "f", "zero", "neg", "negi", "s", "none"]
            .iter()
            .map(|k| get_u64(&v, k))
            .collect();
        assert_eq!(counts, [Some(7), Some(3), Some(0), None, None, None, None]);
    }

    #[test]
    fn anthropic_ids_are_sanitized() {
        assert_eq!(anthropic_tool_id("call:1/x"), "call_1_x");
        assert_eq!(anthropic_tool_id("toolu_01A-b"), "toolu_01A-b");
    }
}
