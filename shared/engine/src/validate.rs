//! Text rules shared by every edge that accepts configuration: the control plane's admin API and
//! the data plane's standalone YAML. Pure functions; each returns a message that never repeats the
//! value it rejects (the value may be a secret, or megabytes long), so callers prefix the field
//! path and can show the message as is.
//!
//! - every string: no NUL (Postgres text cannot hold it, and C-string consumers truncate at it);
//! - single-line strings (names, URLs, models, groups, secrets): no ASCII control character at
//!   all, so nothing can split a header, a log line or a multipart body;
//! - header names: an RFC 9110 token; header values: no control character but horizontal tab.

/// Where in the value the first offending character is, and which it is, e.g.
/// `contains a control character (U+000A) at byte 7`.
fn describe(what: &str, byte: usize, c: char) -> String {
    format!("contains {what} (U+{:04X}) at byte {byte}", u32::from(c))
}

/// Any string field: rejects NUL.
pub fn check_no_nul(value: &str) -> Result<(), String> {
    match value.find('\0') {
        Some(at) => Err(describe("a NUL character", at, '\0')),
        None => Ok(()),
    }
}

/// Longest retry error pattern accepted (bytes).
pub const MAX_RETRY_PATTERN_BYTES: usize = 1024;
/// Most retry error patterns one channel may have.
pub const MAX_RETRY_PATTERNS: usize = 64;

/// A channel's retry error patterns: at most [`MAX_RETRY_PATTERNS`]. Each is looked for in the
/// body of every failed answer, on every proxy, so each is short as well
/// ([`check_retry_error_pattern`]).
pub fn check_retry_error_patterns(patterns: &[String]) -> Result<(), String> {
    if patterns.len() > MAX_RETRY_PATTERNS {
        return Err(format!(
            "has {} entries; at most {MAX_RETRY_PATTERNS} are allowed",
            patterns.len()
        ));
    }
    Ok(())
}

/// One retry error pattern: at most [`MAX_RETRY_PATTERN_BYTES`] bytes, no NUL.
pub fn check_retry_error_pattern(value: &str) -> Result<(), String> {
    if value.len() > MAX_RETRY_PATTERN_BYTES {
        return Err(format!(
            "is {} bytes long; at most {MAX_RETRY_PATTERN_BYTES} are allowed",
            value.len()
        ));
    }
    check_no_nul(value)
}

/// A single-line field: rejects every ASCII control character (U+0000..U+001F, U+007F), tab,
/// CR and LF included.
pub fn check_single_line(value: &str) -> Result<(), String> {
    match value.char_indices().find(|(_, c)| c.is_ascii_control()) {
        Some((at, c)) => Err(describe("a control character", at, c)),
        None => Ok(()),
    }
}

/// An upstream credential: it is sent as a header value (`Authorization: Bearer …`,
/// `x-api-key`), so it must be a single line. The message never contains the secret.
pub fn check_secret(value: &str) -> Result<(), String> {
    check_single_line(value)
        .map_err(|m| format!("{m}; a secret must be one line of printable characters"))
}

/// An upstream model name: it is spliced into request bodies (JSON and multipart), so it must be
/// a single line.
pub fn check_upstream_model(value: &str) -> Result<(), String> {
    check_single_line(value)
}

/// Longest header name accepted.
pub const MAX_HEADER_NAME_BYTES: usize = 256;
/// Longest header value accepted.
pub const MAX_HEADER_VALUE_BYTES: usize = 8192;

/// An HTTP header name: a non-empty RFC 9110 token (`!#$%&'*+-.^_`|~`, digits, letters).
pub fn check_header_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("header name must not be empty".to_owned());
    }
    if name.len() > MAX_HEADER_NAME_BYTES {
        return Err(format!(
            "header name is {} bytes long; at most {MAX_HEADER_NAME_BYTES} are allowed",
            name.len()
        ));
    }
    match name
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(*c)))
    {
        Some((at, c)) => Err(format!(
            "header name {} (only letters, digits and !#$%&'*+-.^_`|~ are allowed)",
            describe("an invalid character", at, c)
        )),
        None => Ok(()),
    }
}

/// An HTTP header value: no control character except horizontal tab (so no CR, LF, NUL).
pub fn check_header_value(value: &str) -> Result<(), String> {
    if value.len() > MAX_HEADER_VALUE_BYTES {
        return Err(format!(
            "header value is {} bytes long; at most {MAX_HEADER_VALUE_BYTES} are allowed",
            value.len()
        ));
    }
    if let Some((at, c)) = value
        .char_indices()
        .find(|(_, c)| c.is_ascii_control() && *c != '\t')
    {
        return Err(format!(
            "header value {}",
            describe("a control character", at, c)
        ));
    }
    Ok(())
}

/// `scheme://user:password@host/…` → `scheme://user:***@host/…`; any other string unchanged.
/// The userinfo is everything before the authority's last `@`; the password, everything in it
/// after the first `:`. (The control plane masks stored URLs with the same rule in SQL.)
pub fn redact_url_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    if scheme.is_empty() || scheme.contains(['/', '?', '#', ':']) {
        return url.to_owned();
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let Some(colon) = authority[..at].find(':') else {
        return url.to_owned();
    };
    format!("{scheme}://{}:***{}", &rest[..colon], &rest[at..])
}

/// Does this URL carry a password in its userinfo?
pub fn has_url_password(url: &str) -> bool {
    redact_url_userinfo(url) != url
}

/// At most `max_chars` characters of `value`, with `…` appended when it was cut: for echoing
/// user input in messages without echoing megabytes.
pub fn truncate_for_display(value: &str, max_chars: usize) -> std::borrow::Cow<'_, str> {
    match value.char_indices().nth(max_chars) {
        None => std::borrow::Cow::Borrowed(value),
        Some((cut, _)) => std::borrow::Cow::Owned(format!("{}…", &value[..cut])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_error_patterns_are_bounded_in_count_and_length() {
        let patterns = |n| vec!["quota".to_owned(); n];
        assert!(check_retry_error_patterns(&patterns(0)).is_ok());
        assert!(check_retry_error_patterns(&patterns(MAX_RETRY_PATTERNS)).is_ok());
        assert_eq!(
            check_retry_error_patterns(&patterns(MAX_RETRY_PATTERNS + 1)),
            Err("has 65 entries; at most 64 are allowed".to_owned())
        );
        assert!(check_retry_error_pattern(&"p".repeat(MAX_RETRY_PATTERN_BYTES)).is_ok());
        assert_eq!(
            check_retry_error_pattern(&"p".repeat(MAX_RETRY_PATTERN_BYTES + 1)),
            Err("is 1025 bytes long; at most 1024 are allowed".to_owned())
        );
        assert!(check_retry_error_pattern("a\0b").is_err());
    }

    #[test]
    fn nul_is_rejected_everywhere_and_named_by_position() {
        assert!(check_no_nul("a\nb\tc").is_ok());
        assert_eq!(
            check_no_nul("ab\0c").unwrap_err(),
            "contains a NUL character (U+0000) at byte 2"
        );
        assert!(check_single_line("a\0").is_err());
        assert!(check_header_value("a\0").is_err());
    }

    #[test]
    fn single_line_rejects_every_ascii_control() {
        for c in (0u8..0x20).chain([0x7f]) {
            let value = format!("ab{}", char::from(c));
            assert!(check_single_line(&value).is_err(), "{c:#x}");
        }
        assert!(check_single_line("gpt-4o/ünïcode 😀 spaces ok").is_ok());
    }

    #[test]
    fn an_upstream_model_must_be_one_line() {
        assert!(check_upstream_model("gpt-4o-mini").is_ok());
        assert!(check_upstream_model("models/gemini 2.5 pro").is_ok());
        for bad in ["gpt\n4", "gpt\r\n--boundary", "gpt\t4", "gpt\u{0}"] {
            assert!(check_upstream_model(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn secret_errors_never_contain_the_secret() {
        let secret = "sk-very-secret-value\r\nx-injected: 1";
        let message = check_secret(secret).unwrap_err();
        assert!(!message.contains("sk-very"), "{message}");
        assert!(message.contains("U+000D"), "{message}");
        assert!(check_secret("sk-fine").is_ok());
    }

    #[test]
    fn header_names_and_values() {
        assert!(check_header_name("x-portkey-api-key").is_ok());
        assert!(check_header_name("X_Custom.1~").is_ok());
        for bad in ["", "a b", "a:b", "a\nb", "é", "a\0"] {
            assert!(check_header_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_header_name(&"a".repeat(257)).is_err());
        assert!(check_header_name(&"a".repeat(MAX_HEADER_NAME_BYTES)).is_ok());
        assert!(check_header_value(&"a".repeat(MAX_HEADER_VALUE_BYTES)).is_ok());
        assert!(check_header_value("Bearer abc\tdef").is_ok());
        assert!(check_header_value("").is_ok());
        for bad in ["a\r\nb: c", "a\nb", "a\0", "a\x7f"] {
            assert!(check_header_value(bad).is_err(), "{bad:?}");
        }
        assert!(check_header_value(&"a".repeat(8193)).is_err());
    }

    #[test]
    fn userinfo_passwords_are_masked() {
        for (url, want) in [
            ("https://user:pw@h.test/v1", "https://user:***@h.test/v1"),
            ("https://user:p@ss@h.test/v1", "https://user:***@h.test/v1"),
            ("https://a@b:c@h.test", "https://a@b:***@h.test"),
            ("http://:pw@h.test?x=1", "http://:***@h.test?x=1"),
            ("https://user@h.test/v1", "https://user@h.test/v1"),
            ("https://h.test:8080/v1", "https://h.test:8080/v1"),
            ("https://h.test:8080/p@x:y", "https://h.test:8080/p@x:y"),
            ("https://u@h.test:8080/", "https://u@h.test:8080/"),
            ("mock://sim?latency_ms=5", "mock://sim?latency_ms=5"),
            ("not a url", "not a url"),
            // No scheme, or no valid one before `://`: not a URL, left as it is.
            ("://user:pw@h.test", "://user:pw@h.test"),
            ("a/b://user:pw@h.test", "a/b://user:pw@h.test"),
        ] {
            assert_eq!(redact_url_userinfo(url), want, "{url}");
        }
        assert!(has_url_password("https://u:p@h"));
        assert!(!has_url_password("https://u@h"));
    }

    #[test]
    fn truncation_is_by_characters_with_an_ellipsis() {
        assert_eq!(truncate_for_display("abc", 3), "abc");
        assert_eq!(truncate_for_display("abcd", 3), "abc…");
        assert_eq!(truncate_for_display("ééé", 2), "éé…");
    }
}
