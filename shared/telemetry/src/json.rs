//! JSON values appended straight to a line's buffer, byte for byte as `serde_json` writes them,
//! for lines written by hand (the keys as static bytes, no serializer in between).
//!
//! The rules, which are `serde_json`'s: a string is quoted, with `"` and `\` escaped by a
//! backslash and the control bytes U+0000–U+001F as `\b`, `\t`, `\n`, `\f`, `\r` or `\u00xx`
//! (lowercase hex); everything else (`/`, DEL, non-ASCII) is copied as it is. An integer is its
//! decimal digits. A finite float is its shortest round-trip form (`serde_json`'s own formatter,
//! `zmij`); NaN and the infinities are `null`.

/// What each byte becomes inside a JSON string: 0 (itself), the letter after the backslash, or
/// `u` for a `\u00xx` escape.
const ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = b'u';
        byte += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `value` as a JSON string. A string with nothing to escape (the usual case) is copied
/// in one piece; otherwise the runs between escapes are.
pub fn string(out: &mut Vec<u8>, value: &str) {
    let bytes = value.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let clean = clean_prefix(bytes);
    let mut run = 0;
    for (at, &byte) in bytes.iter().enumerate().skip(clean) {
        let escape = ESCAPE[usize::from(byte)];
        if escape == 0 {
            continue;
        }
        out.extend_from_slice(&bytes[run..at]);
        if escape == b'u' {
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ]);
        } else {
            out.extend_from_slice(&[b'\\', escape]);
        }
        run = at + 1;
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

/// How many leading bytes of `bytes` certainly need no escape, checked eight at a time: it
/// stops at the first eight that might hold a control byte, `"` or `\` (and before the last
/// fewer than eight), never past one. The byte-by-byte loop decides from there.
fn clean_prefix(bytes: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // Some byte of `word` is below `n` (n <= 0x80), or zero.
    let below = |word: u64, n: u64| word.wrapping_sub(ONES * n) & !word & HIGHS != 0;
    let mut clean = 0;
    for chunk in bytes.chunks_exact(8) {
        let Ok(chunk) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let word = u64::from_le_bytes(chunk);
        if below(word, 0x20) || below(word ^ (ONES * 0x22), 1) || below(word ^ (ONES * 0x5c), 1) {
            break;
        }
        clean += 8;
    }
    clean
}

/// Appends an integer in decimal.
pub fn integer(out: &mut Vec<u8>, value: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// Appends a float: its shortest round-trip form when finite, else `null`.
pub fn float(out: &mut Vec<u8>, value: f64) {
    if value.is_finite() {
        out.extend_from_slice(zmij::Buffer::new().format_finite(value).as_bytes());
    } else {
        out.extend_from_slice(b"null");
    }
}

/// Appends `true` or `false`.
pub fn boolean(out: &mut Vec<u8>, value: bool) {
    out.extend_from_slice(if value { b"true" } else { b"false" });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(value: &str) -> Vec<u8> {
        let mut out = Vec::new();
        string(&mut out, value);
        out
    }

    #[test]
    fn every_single_byte_string_is_escaped_as_serde_json_escapes_it() {
        for byte in 0..=0x7fu8 {
            let value = char::from(byte).to_string();
            assert_eq!(
                ours(&value),
                serde_json::to_vec(&value).unwrap(),
                "byte {byte:#04x}"
            );
        }
        // Every other byte is part of a multi-byte character: every two-byte character (each
        // lead byte, each continuation byte), and a sample of longer ones.
        let longer = [
            '\u{800}',
            '\u{2028}',
            '\u{fffd}',
            '\u{ffff}',
            '\u{1f980}',
            '\u{10ffff}',
        ];
        for ch in ('\u{80}'..='\u{7ff}').chain(longer) {
            let value = ch.to_string();
            assert_eq!(ours(&value), serde_json::to_vec(&value).unwrap(), "{ch:?}");
        }
    }

    #[test]
    fn strings_with_escapes_non_ascii_and_nothing_are_written_as_serde_json_writes_them() {
        let all_ascii: String = (0..=0x7fu8).map(char::from).collect();
        for value in [
            "",
            "plain",
            "a/b",
            "é",
            "日本語",
            "🦀 emoji",
            "\"quoted\"",
            "back\\slash",
            "\u{7f}del",
            "\u{0}\u{1}\u{1f}",
            "line\nbreak\r\n\ttab\u{8}\u{c}",
            "\\\"\\\"",
            "ends with \"",
            "\"starts",
            "mixed é \"🦀\" \\ \u{10} \u{1b}[0m",
            &all_ascii,
        ] {
            assert_eq!(ours(value), serde_json::to_vec(value).unwrap(), "{value:?}");
        }
    }

    #[test]
    fn an_escape_at_any_place_in_a_long_string_is_found() {
        // The clean prefix is checked eight bytes at a time: every escape, at every offset of
        // strings long enough for several words, among ASCII and multi-byte neighbours.
        let specials = [
            "\"", "\\", "\u{0}", "\n", "\u{1f}", "\u{7f}", "é", "🦀", "/", " ", "~",
        ];
        for fill in ["abcdefgh", "éàü", "🦀"] {
            for len in 0..26 {
                let base: String = fill.chars().cycle().take(len).collect();
                for at in 0..=len {
                    for special in specials {
                        let mut value: String = base.chars().take(at).collect();
                        value.push_str(special);
                        value.extend(base.chars().skip(at));
                        assert_eq!(
                            ours(&value),
                            serde_json::to_vec(&value).unwrap(),
                            "{value:?}"
                        );
                    }
                }
            }
        }
        assert_eq!(clean_prefix(b"0123456789abcdefX"), 16);
        assert_eq!(clean_prefix(b"01234567\"89abcdef"), 8);
        assert_eq!(clean_prefix(b" \x7f~/!#[]\xc3\xa9"), 8);
        assert_eq!(clean_prefix(b"01234567\\"), 8);
        assert_eq!(clean_prefix(b"0123456\x1f89abcdef"), 0);
        assert_eq!(clean_prefix("0123456789abcdéé".as_bytes()), 16);
    }

    #[test]
    fn numbers_and_booleans_are_written_as_serde_json_writes_them() {
        for value in [0u64, 1, 9, 10, 99, 1_000, u64::from(u32::MAX), u64::MAX] {
            let mut out = Vec::new();
            integer(&mut out, value);
            assert_eq!(out, serde_json::to_vec(&value).unwrap());
        }
        for value in [0i64, -1, i64::MIN, i64::MAX, 42] {
            let mut out = Vec::new();
            integer(&mut out, value);
            assert_eq!(out, serde_json::to_vec(&value).unwrap());
        }
        for value in [
            0.0,
            -0.0,
            1.0,
            0.5,
            1e-7,
            123_456.789,
            1e15,
            1e16,
            1e21,
            1e22,
            f64::MIN_POSITIVE,
            f64::MAX,
            f64::EPSILON,
            0.1 + 0.2,
            -3.25,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            let mut out = Vec::new();
            float(&mut out, value);
            assert_eq!(
                out,
                serde_json::to_vec(&value).unwrap(),
                "{value:?} as {}",
                String::from_utf8_lossy(&out)
            );
        }
        for value in [true, false] {
            let mut out = Vec::new();
            boolean(&mut out, value);
            assert_eq!(out, serde_json::to_vec(&value).unwrap());
        }
    }
}
