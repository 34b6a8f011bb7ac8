//! Pass-through routes: which paths of a channel's own API a client may reach through the
//! gateway (`ANY /passthrough/{channel}/{path}`), and which channels a team's key may reach.
//!
//! A channel opts in with a list of path patterns. A pattern starts with `/`; `*` matches any run
//! of characters, `/` included (so `/v1/fine_tuning/*` matches `/v1/fine_tuning/jobs` and
//! `/v1/fine_tuning/jobs/ftjob-1/events`, but not `/v1/fine_tuning` itself); every other
//! character matches itself, case-sensitively. The path is matched as the client sent it
//! (percent-encoded), without its query string. A path with a dot segment (`.`, `..`, also
//! percent-encoded), an encoded `/` or `\`, or an empty segment is refused before any pattern is
//! read: an upstream that resolved it differently could be led outside what the patterns allow.

use crate::ids::ChannelId;
use crate::model::{Route, Team};
use crate::pattern::{glob, wildcard_match};

/// Most patterns one channel may list.
pub const MAX_PATTERNS: usize = 64;
/// Longest pattern, in characters.
pub const MAX_PATTERN_CHARS: usize = 256;
/// Longest path the gateway passes through, in bytes (query string not included).
pub const MAX_PATH_BYTES: usize = 2048;

/// Checks one path pattern an operator submits (the message never needs the field's name).
pub fn validate_pattern(pattern: &str) -> Result<(), String> {
    if !pattern.starts_with('/') {
        return Err("a pass-through pattern must start with `/`".into());
    }
    let chars = pattern.chars().count();
    if chars > MAX_PATTERN_CHARS {
        return Err(format!(
            "a pass-through pattern is at most {MAX_PATTERN_CHARS} characters long, not {chars}"
        ));
    }
    if let Some(c) = pattern
        .chars()
        .find(|c| c.is_control() || c.is_whitespace() || matches!(c, '?' | '#' | '\\'))
    {
        return Err(format!(
            "a pass-through pattern must not contain whitespace, control characters, `?`, `#` or `\\` (found {c:?})"
        ));
    }
    if pattern.contains("**") {
        return Err(
            "a pass-through pattern must not contain `**`; a single `*` already matches any run of characters, `/` included"
                .into(),
        );
    }
    if pattern.split('/').skip(1).any(|s| s == "." || s == "..") {
        return Err("a pass-through pattern must not contain `.` or `..` segments".into());
    }
    Ok(())
}

/// Checks a channel's whole list: at most [`MAX_PATTERNS`], each valid, none twice. The error
/// names the index of the pattern at fault.
pub fn validate_patterns(patterns: &[String]) -> Result<(), (Option<usize>, String)> {
    if patterns.len() > MAX_PATTERNS {
        return Err((
            None,
            format!(
                "at most {MAX_PATTERNS} pass-through patterns per channel, not {}",
                patterns.len()
            ),
        ));
    }
    for (i, pattern) in patterns.iter().enumerate() {
        validate_pattern(pattern).map_err(|m| (Some(i), m))?;
        if patterns[..i].contains(pattern) {
            return Err((Some(i), "a pass-through pattern is listed twice".into()));
        }
    }
    Ok(())
}

/// Whether `path` (as sent, without its query string) matches one of `patterns`.
pub fn path_allowed(patterns: &[String], path: &str) -> bool {
    // `?` is no wildcard here (a path has no `?`); NUL never occurs in a valid pattern.
    patterns
        .iter()
        .any(|p| glob(p.as_bytes(), path.as_bytes(), b'*', 0))
}

/// Why a path cannot be passed through at all, whatever the patterns say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadPath {
    /// Longer than [`MAX_PATH_BYTES`].
    TooLong,
    /// A `.` or `..` segment, literal or percent-encoded.
    DotSegment,
    /// A `\` or a percent-encoded `/` or `\`, or a malformed percent escape.
    Separator,
    /// Two `/` in a row.
    EmptySegment,
}

impl BadPath {
    pub fn describe(self) -> &'static str {
        match self {
            BadPath::TooLong => "the pass-through path is too long",
            BadPath::DotSegment => "the pass-through path must not contain `.` or `..` segments",
            BadPath::Separator => {
                "the pass-through path must not contain `\\`, an encoded `/` or `\\`, or a malformed percent escape"
            }
            BadPath::EmptySegment => "the pass-through path must not contain `//`",
        }
    }
}

/// Checks a client's pass-through path (it starts with `/`; a trailing `/` is allowed).
pub fn check_path(path: &str) -> Result<(), BadPath> {
    if path.len() > MAX_PATH_BYTES {
        return Err(BadPath::TooLong);
    }
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let last = segments.len().saturating_sub(1);
    for (i, segment) in segments.iter().enumerate() {
        if segment.is_empty() && i != last {
            return Err(BadPath::EmptySegment);
        }
        let decoded = decode_segment(segment)?;
        if decoded == "." || decoded == ".." {
            return Err(BadPath::DotSegment);
        }
    }
    Ok(())
}

/// A segment with its percent escapes of ASCII decoded (other bytes kept encoded: only `.`,
/// `/` and `\` matter here).
fn decode_segment(segment: &str) -> Result<String, BadPath> {
    let mut out = String::with_capacity(segment.len());
    // Each step consumes what it read from the front of `rest`: one byte, or an escape's three.
    let mut rest = segment.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        rest = tail;
        let byte = match b {
            b'\\' => return Err(BadPath::Separator),
            b'%' => {
                let (hex, after) = tail.split_at_checked(2).ok_or(BadPath::Separator)?;
                rest = after;
                // Two hex digits exactly (`from_str_radix` alone would also take `+f`).
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return Err(BadPath::Separator);
                }
                let byte = std::str::from_utf8(hex)
                    .ok()
                    .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                    .ok_or(BadPath::Separator)?;
                if matches!(byte, b'/' | b'\\') {
                    return Err(BadPath::Separator);
                }
                byte
            }
            b => b,
        };
        out.push(if byte.is_ascii() {
            char::from(byte)
        } else {
            '%'
        });
    }
    Ok(out)
}

/// Whether a key of `team` may reach `channel` through a pass-through route: some enabled route
/// the team may call (one of its model patterns matches the route's pattern, or the route's
/// pattern matches one of them) has an enabled member on that channel that the team may use
/// (its member list is empty, or names that member). A key without a team may reach every
/// channel that allows pass-through.
pub fn team_reaches_channel(routes: &[Route], team: &Team, channel: ChannelId) -> bool {
    routes
        .iter()
        .filter(|r| r.enabled && team_calls_route(team, &r.model_pattern))
        .flat_map(|r| &r.members)
        .any(|m| {
            m.enabled
                && m.channel_id == channel
                && (team.members.is_empty() || team.members.contains(&m.id))
        })
}

/// Whether one of the team's model patterns and the route's pattern can name the same model.
fn team_calls_route(team: &Team, route_pattern: &str) -> bool {
    team.models.iter().map(|p| p.trim()).any(|p| {
        p == route_pattern || wildcard_match(p, route_pattern) || wildcard_match(route_pattern, p)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patterns(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_star_matches_within_and_across_segments() {
        let p = patterns(&["/v1/fine_tuning/*", "/v1/files"]);
        assert!(path_allowed(&p, "/v1/fine_tuning/jobs"));
        assert!(path_allowed(&p, "/v1/fine_tuning/jobs/ftjob-1/events"));
        assert!(path_allowed(&p, "/v1/files"));
        assert!(!path_allowed(&p, "/v1/fine_tuning"));
        assert!(!path_allowed(&p, "/v1/files/file-1"));
        assert!(!path_allowed(&p, "/v1/FILES"));
        assert!(!path_allowed(&[], "/v1/files"));
        // `?` is a plain character in a pattern, never a wildcard.
        assert!(!path_allowed(&patterns(&["/v1/a?c"]), "/v1/abc"));
        assert!(path_allowed(&patterns(&["/*"]), "/anything/at/all"));
    }

    #[test]
    fn patterns_are_checked_with_the_index_at_fault() {
        for good in ["/v1/fine_tuning/*", "/*", "/v1/models", "/model/*/invoke"] {
            assert_eq!(validate_pattern(good), Ok(()), "{good}");
        }
        for bad in [
            "v1/files",
            "",
            "/v1/a b",
            "/v1/**",
            "/v1/files?x=1",
            "/v1/../admin",
            "/v1/./x",
            "/v1\\x",
        ] {
            assert!(validate_pattern(bad).is_err(), "{bad}");
        }
        let long = format!("/{}", "a".repeat(MAX_PATTERN_CHARS));
        assert!(validate_pattern(&long).is_err());
        let e = validate_patterns(&patterns(&["/v1/a", "nope"])).unwrap_err();
        assert_eq!(e.0, Some(1));
        let e = validate_patterns(&patterns(&["/v1/a", "/v1/a"])).unwrap_err();
        assert_eq!(e.0, Some(1));
        let many: Vec<String> = (0..=MAX_PATTERNS).map(|i| format!("/p{i}")).collect();
        assert_eq!(validate_patterns(&many).unwrap_err().0, None);
        assert_eq!(validate_patterns(&many[..MAX_PATTERNS]), Ok(()));
    }

    #[test]
    fn paths_that_could_resolve_elsewhere_upstream_are_refused() {
        for good in [
            "/v1/files",
            "/v1/files/",
            "/v1/fine_tuning/jobs/ftjob-1",
            "/v1/a%20b",
            "/v1/x.y/..z",
        ] {
            assert_eq!(check_path(good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("/v1/../admin", BadPath::DotSegment),
            ("/v1/./files", BadPath::DotSegment),
            ("/v1/%2e%2E/admin", BadPath::DotSegment),
            ("/v1/.%2e/admin", BadPath::DotSegment),
            ("/v1/files/..", BadPath::DotSegment),
            ("/v1/a%2fb", BadPath::Separator),
            ("/v1/a%5Cb", BadPath::Separator),
            ("/v1/a\\b", BadPath::Separator),
            ("/v1/a%zz", BadPath::Separator),
            ("/v1/a%2", BadPath::Separator),
            ("/v1/a%", BadPath::Separator),
            ("/v1/a%+e", BadPath::Separator),
            ("/v1/a%e", BadPath::Separator),
            ("/v1//files", BadPath::EmptySegment),
        ] {
            assert_eq!(check_path(bad), Err(why), "{bad}");
        }
        let long = format!("/{}", "a".repeat(MAX_PATH_BYTES));
        assert_eq!(check_path(&long), Err(BadPath::TooLong));
    }
}
