//! The pieces every protocol's builders share: response ids, the clock, SSE framing, splitting a
//! text into stream pieces, and base64.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh process-unique number for response ids (`chatcmpl-mock-N`, `msg_mock_N`, ...).
pub fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub(crate) fn sse_data(value: &Value) -> String {
    format!("data: {value}\n\n")
}

/// A Gemini SSE event: `data: {json}` and a CRLF blank line.
pub(crate) fn sse_data_crlf(value: &Value) -> String {
    format!("data: {value}\r\n\r\n")
}

pub(crate) fn sse_event(name: &str, value: &Value) -> String {
    format!("event: {name}\ndata: {value}\n\n")
}

/// Splits `text` into at most `n` non-empty consecutive pieces of nearly equal length (in
/// characters) that concatenate back to it; fewer when `text` is shorter than `n`, none when it
/// is empty. Used for tool-call arguments, which have few spaces to split at.
pub fn split_even(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let n = n.min(chars.len());
    if n == 0 {
        return Vec::new();
    }
    let per = chars.len() / n;
    let extra = chars.len() % n;
    let mut pieces = Vec::with_capacity(n);
    let mut at = 0;
    for i in 0..n {
        let len = per + usize::from(i < extra);
        pieces.push(chars[at..at + len].iter().collect());
        at += len;
    }
    pieces
}

/// Splits `content` into exactly `n` consecutive pieces that concatenate back to it (word
/// boundaries where there are enough words; empty pieces when the text is shorter than `n`).
pub fn split_content(content: &str, n: usize) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    // Words keep their leading space so that concatenation restores the text exactly.
    let mut words: Vec<String> = Vec::new();
    for (i, word) in content.split(' ').enumerate() {
        words.push(if i == 0 {
            word.to_owned()
        } else {
            format!(" {word}")
        });
    }
    words.retain(|w| !w.is_empty());
    let mut pieces = vec![String::new(); n];
    if words.len() <= n {
        for (piece, word) in pieces.iter_mut().zip(words) {
            *piece = word;
        }
    } else {
        // More words than pieces: spread them evenly, earlier pieces take the remainder.
        let per = words.len() / n;
        let extra = words.len() % n;
        let mut words = words.into_iter();
        for (i, piece) in pieces.iter_mut().enumerate() {
            let take = per + usize::from(i < extra);
            *piece = words.by_ref().take(take).collect();
        }
    }
    pieces
}

/// Standard base64 with padding (small enough not to need a crate).
pub fn base64_encode(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(TABLE[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::DEFAULT_CONTENT;

    #[test]
    fn split_content_restores_the_text() {
        for n in 1..8 {
            let pieces = split_content(DEFAULT_CONTENT, n);
            assert_eq!(pieces.len(), n);
            assert_eq!(pieces.concat(), DEFAULT_CONTENT);
        }
        assert_eq!(
            split_content(DEFAULT_CONTENT, 3),
            ["Hello", " from", " mock"]
        );
        assert!(split_content("", 2).iter().all(String::is_empty));
    }

    #[test]
    fn split_even_restores_the_text() {
        let args = r#"{"city":"Paris"}"#;
        for n in 1..30 {
            let pieces = split_even(args, n);
            assert_eq!(pieces.len(), n.min(args.len()));
            assert!(pieces.iter().all(|p| !p.is_empty()));
            assert_eq!(pieces.concat(), args);
        }
        assert!(split_even("", 3).is_empty());
        assert!(split_even("abc", 0).is_empty());
    }

    #[test]
    fn ids_are_fresh_and_the_clock_is_unix_seconds() {
        let first = next_id();
        let second = next_id();
        assert!(second > first);
        // After 2023-11 and before 2100.
        let now = now_secs();
        assert!(now > 1_700_000_000 && now < 4_102_444_800, "{now}");
    }

    #[test]
    fn sse_helpers_frame_complete_events() {
        let v = json!({"a": 1});
        assert_eq!(sse_data(&v), "data: {\"a\":1}\n\n");
        assert_eq!(sse_data_crlf(&v), "data: {\"a\":1}\r\n\r\n");
        assert_eq!(sse_event("e", &v), "event: e\ndata: {\"a\":1}\n\n");
    }

    #[test]
    fn splits_give_the_earlier_pieces_the_remainder() {
        assert_eq!(split_content("a b c d e", 2), ["a b c", " d e"]);
        assert_eq!(split_content("a b c d e f g", 3), ["a b c", " d e", " f g"]);
        assert_eq!(split_content("a b", 4), ["a", " b", "", ""]);
        assert!(split_content("a b", 0).is_empty());
        assert_eq!(split_even("abcde", 2), ["abc", "de"]);
        assert_eq!(split_even("abcdefg", 3), ["abc", "de", "fg"]);
        assert_eq!(split_even("ab", 5), ["a", "b"]);
        assert_eq!(split_even("ééé", 2), ["éé", "é"]);
    }

    #[test]
    fn base64_matches_known_vectors() {
        assert_eq!(base64_encode(b""), "");
        assert_eq!(base64_encode(b"f"), "Zg==");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
        assert_eq!(base64_encode(b"foo"), "Zm9v");
        assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64_encode(b"foob"), "Zm9vYg==");
        assert_eq!(base64_encode(b"fooba"), "Zm9vYmE=");
        // Every bit set, and the alphabet's last two characters.
        assert_eq!(base64_encode(&[0xFF, 0xFF, 0xFF]), "////");
        assert_eq!(base64_encode(&[0xFB, 0xEF]), "++8=");
    }
}
