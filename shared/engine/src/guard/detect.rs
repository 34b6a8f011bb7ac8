//! The built-in detectors: what each finds, the longest text it can match (so a stream window
//! knows how much to hold back), and the checks that keep false positives low (a card number
//! passes the Luhn check and names a known issuer, an IBAN passes its mod-97 check, a key stands
//! alone rather than inside a longer word).
//!
//! A detector is a linear-time regular expression for the shape plus a pure check of the
//! candidate; a candidate the check refuses is tried again shorter (at a separator) and then
//! from its next character, so one bad candidate never hides a good one next to it.

use std::ops::Range;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// A built-in detector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Detector {
    /// An e-mail address (`local@domain.tld`; the local part at most 64 characters, no leading,
    /// trailing or doubled dot; the domain's labels at most 63 characters, not starting or ending
    /// with `-`; a top-level domain of 2 to 24 letters).
    Email,
    /// A phone number: international (`+` and 8 to 15 digits, spaces, dots, dashes and
    /// parentheses between them) or the national shapes `(212) 555-0100`, `212-555-0100` and
    /// `030 1234 5678`. A bare run of digits is not a phone number.
    Phone,
    /// A payment card number: 13 to 19 digits (optionally grouped by one kind of separator,
    /// spaces or dashes), a known issuer prefix and a valid Luhn check digit.
    Card,
    /// An IBAN: country code, check digits and 11 to 30 letters or digits (optionally grouped by
    /// spaces), 15 to 34 characters long, with a valid mod-97 checksum.
    Iban,
    /// An OpenAI API key: `sk-…`, `sk-proj-…`, `sk-svcacct-…`, `sk-admin-…`.
    OpenaiKey,
    /// An Anthropic API key: `sk-ant-…`.
    AnthropicKey,
    /// An AWS access key id: `AKIA…` (long-term) or `ASIA…` (temporary), 20 characters.
    AwsAccessKey,
    /// A Google API key: `AIza` and 35 characters.
    GoogleApiKey,
    /// A GitHub token: `ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_` and 36 characters, or a
    /// fine-grained `github_pat_…`.
    GithubToken,
    /// A Slack token: `xoxb-`, `xoxp-`, `xoxa-`, `xoxo-`, `xoxr-`, `xoxs-`.
    SlackToken,
    /// A PEM private key, from its `-----BEGIN … PRIVATE KEY-----` line to its `-----END …`
    /// line (or, when that never comes, over the key text after the first line).
    PrivateKey,
}

/// The longest private key block matched (bytes): a 4096-bit RSA key in PEM is about 3.3 KB.
pub const MAX_PRIVATE_KEY_BYTES: usize = 8 * 1024;

impl Detector {
    pub const ALL: [Detector; 11] = [
        Detector::Email,
        Detector::Phone,
        Detector::Card,
        Detector::Iban,
        Detector::OpenaiKey,
        Detector::AnthropicKey,
        Detector::AwsAccessKey,
        Detector::GoogleApiKey,
        Detector::GithubToken,
        Detector::SlackToken,
        Detector::PrivateKey,
    ];

    /// The API key detectors, which the name `api_keys` stands for in a rule.
    pub const API_KEYS: [Detector; 6] = [
        Detector::OpenaiKey,
        Detector::AnthropicKey,
        Detector::AwsAccessKey,
        Detector::GoogleApiKey,
        Detector::GithubToken,
        Detector::SlackToken,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Detector::Email => "email",
            Detector::Phone => "phone",
            Detector::Card => "card",
            Detector::Iban => "iban",
            Detector::OpenaiKey => "openai_key",
            Detector::AnthropicKey => "anthropic_key",
            Detector::AwsAccessKey => "aws_access_key",
            Detector::GoogleApiKey => "google_api_key",
            Detector::GithubToken => "github_token",
            Detector::SlackToken => "slack_token",
            Detector::PrivateKey => "private_key",
        }
    }

    /// The kind a finding of this detector has, and its placeholders' stem (`[EMAIL_1]`).
    pub fn label(self) -> &'static str {
        match self {
            Detector::Email => "EMAIL",
            Detector::Phone => "PHONE",
            Detector::Card => "CARD",
            Detector::Iban => "IBAN",
            Detector::OpenaiKey => "OPENAI_KEY",
            Detector::AnthropicKey => "ANTHROPIC_KEY",
            Detector::AwsAccessKey => "AWS_KEY",
            Detector::GoogleApiKey => "GOOGLE_KEY",
            Detector::GithubToken => "GITHUB_TOKEN",
            Detector::SlackToken => "SLACK_TOKEN",
            Detector::PrivateKey => "PRIVATE_KEY",
        }
    }

    /// The longest text (bytes) a finding of this detector can span.
    pub fn max_match_bytes(self) -> usize {
        match self {
            Detector::Email => 64 + 1 + 253 + 1 + 24,
            Detector::Phone => 32,
            Detector::Card => 19 + 18,
            Detector::Iban => 34 + 33,
            Detector::OpenaiKey => 3 + 240,
            Detector::AnthropicKey => 7 + 200,
            Detector::AwsAccessKey => 20,
            Detector::GoogleApiKey => 39,
            Detector::GithubToken => 11 + 82,
            Detector::SlackToken => 5 + 250,
            Detector::PrivateKey => MAX_PRIVATE_KEY_BYTES,
        }
    }

    /// Parses one name (`api_keys` is not a single detector: see [`parse_detectors`]).
    pub fn parse(text: &str) -> Option<Detector> {
        Detector::ALL
            .into_iter()
            .find(|d| d.as_str() == text.trim())
    }

    /// The shape this detector looks for (its check refines it).
    fn pattern(self) -> &'static str {
        match self {
            Detector::Email => {
                r"(?i)[a-z0-9._%+\-]{1,64}@[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?){0,8}\.[a-z]{2,24}"
            }
            Detector::Phone => {
                r"\+[1-9][0-9 ().\-]{6,26}[0-9]|\(?[0-9]{3}\)?[ .\-]?[0-9]{3}[ .\-][0-9]{4}|0[0-9]{2,4}[ \-][0-9]{3,4}[ \-]?[0-9]{3,4}"
            }
            Detector::Card => r"[0-9](?:[ \-]?[0-9]){12,18}",
            Detector::Iban => r"[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}",
            Detector::OpenaiKey => r"sk-[A-Za-z0-9_\-]{20,240}",
            Detector::AnthropicKey => r"sk-ant-[A-Za-z0-9_\-]{20,200}",
            Detector::AwsAccessKey => r"(?:AKIA|ASIA)[A-Z0-9]{16}",
            Detector::GoogleApiKey => r"AIza[A-Za-z0-9_\-]{35}",
            Detector::GithubToken => r"gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{82}",
            Detector::SlackToken => r"xox[abposr]-[A-Za-z0-9\-]{10,250}",
            Detector::PrivateKey => r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----",
        }
    }
}

/// Parses detector names, naming the first unknown one; `api_keys` stands for every API key
/// detector. Duplicates are dropped; the result is sorted.
pub fn parse_detectors<S: AsRef<str>>(names: &[S]) -> Result<Vec<Detector>, String> {
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let name = name.as_ref();
        if name.trim() == "api_keys" {
            out.extend(Detector::API_KEYS);
            continue;
        }
        let detector = Detector::parse(name).ok_or_else(|| {
            let known: Vec<&str> = Detector::ALL.iter().map(|d| d.as_str()).collect();
            format!(
                "unknown detector {:?} (one of {}, or api_keys)",
                bounded(name),
                known.join(", ")
            )
        })?;
        out.push(detector);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// A name as an error message may repeat it: at most 40 characters.
fn bounded(text: &str) -> String {
    text.chars().take(40).collect()
}

/// The most memory one compiled user pattern may take (bytes): a pattern whose automaton would be
/// larger is refused with the regex crate's error.
pub const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// Compiles a user pattern (the one compile both the rule's check and the snapshot's compile
/// use), bounded in size and nesting.
pub fn compile_pattern(pattern: &str) -> Result<Regex, regex::Error> {
    regex::RegexBuilder::new(pattern)
        .size_limit(PATTERN_SIZE_LIMIT)
        .dfa_size_limit(PATTERN_SIZE_LIMIT)
        .nest_limit(64)
        .build()
}

/// One detector, compiled.
#[derive(Debug, Clone)]
pub struct Matcher {
    detector: Detector,
    shape: Regex,
    /// The private key detector's end line.
    end: Option<Regex>,
}

impl Matcher {
    /// Compiles a detector (its expressions are constants; a unit test compiles every one).
    pub fn new(detector: Detector) -> Result<Matcher, regex::Error> {
        let end = match detector {
            Detector::PrivateKey => Some(Regex::new(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----")?),
            _ => None,
        };
        Ok(Matcher {
            detector,
            shape: Regex::new(detector.pattern())?,
            end,
        })
    }

    pub fn detector(&self) -> Detector {
        self.detector
    }

    /// Every finding of this detector in `text`, in order, not overlapping each other.
    pub fn find_all(&self, text: &str) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        let mut at = 0;
        while let Some(m) = self.shape.find_at(text, at) {
            match self.accept(text, m.range()) {
                Some(found) => {
                    at = found.end.max(m.start() + 1);
                    out.push(found);
                }
                None => at = next_char(text, m.start()),
            }
            if at >= text.len() {
                break;
            }
        }
        out
    }

    /// The finding a candidate makes (maybe shorter than the candidate), if any.
    fn accept(&self, text: &str, candidate: Range<usize>) -> Option<Range<usize>> {
        let d = self.detector;
        match d {
            Detector::PrivateKey => Some(self.private_key(text, candidate)),
            Detector::Card | Detector::Iban | Detector::Phone => shorter_ends(text, &candidate)
                .map(|end| candidate.start..end)
                .find(|r| standalone(text, r, d) && valid(d, &text[r.clone()])),
            _ => Some(candidate).filter(|r| standalone(text, r, d) && valid(d, &text[r.clone()])),
        }
    }

    /// A private key block from its first line to its end line, or over the key text that
    /// follows the first line when no end line comes within [`MAX_PRIVATE_KEY_BYTES`].
    fn private_key(&self, text: &str, begin: Range<usize>) -> Range<usize> {
        let limit = floor_char(text, begin.start.saturating_add(MAX_PRIVATE_KEY_BYTES));
        let window = &text[..limit];
        if let Some(end) = self.end.as_ref().and_then(|e| e.find_at(window, begin.end)) {
            return begin.start..end.end();
        }
        let body = window[begin.end..]
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || b"+/=:, \t\r\n".contains(b))
            .count();
        begin.start..begin.end + body
    }
}

/// The byte after the character at `at`.
fn next_char(text: &str, at: usize) -> usize {
    text[at..]
        .chars()
        .next()
        .map_or(text.len(), |c| at + c.len_utf8())
}

/// The largest character boundary at or below `at` (at most `text.len()`).
pub(crate) fn floor_char(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// The candidate's end, then every shorter end just before a separator, longest first.
fn shorter_ends<'t>(text: &'t str, candidate: &Range<usize>) -> impl Iterator<Item = usize> + 't {
    let (start, end) = (candidate.start, candidate.end);
    let seps = text.as_bytes()[start..end]
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, b)| matches!(b, b' ' | b'-' | b'.'))
        .map(move |(i, _)| start + i);
    std::iter::once(end).chain(seps)
}

/// Whether a finding stands alone: no letter or digit (or, for keys, key character) right
/// before or after it.
fn standalone(text: &str, r: &Range<usize>, d: Detector) -> bool {
    let before = text[..r.start].chars().next_back();
    let after = text[r.end..].chars().next();
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    match d {
        Detector::Email => {
            !before.is_some_and(|c| c.is_alphanumeric() || "._%+-".contains(c)) && !word(after)
        }
        Detector::Phone => {
            // A number that goes on after a separator is longer than a phone number.
            let mut rest = text[r.end..].chars();
            let sep = rest.next().is_some_and(|c| " .-".contains(c));
            let goes_on = sep && rest.next().is_some_and(|c| c.is_ascii_digit());
            !word(before) && before != Some('+') && !word(after) && after != Some('-') && !goes_on
        }
        Detector::Card | Detector::Iban => {
            !word(before) && !word(after) && !matches!(after, Some('-'))
        }
        _ => {
            let key = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            !key(before) && before != Some('-') && !key(after)
        }
    }
}

/// The detector's own check of a standalone candidate.
fn valid(d: Detector, found: &str) -> bool {
    match d {
        Detector::Email => valid_email(found),
        Detector::Phone => valid_phone(found),
        Detector::Card => valid_card(found),
        Detector::Iban => valid_iban(found),
        Detector::OpenaiKey => !found.starts_with("sk-ant-") && mixed(&found[3..]),
        Detector::AnthropicKey => mixed(&found[7..]),
        Detector::AwsAccessKey => found[4..].bytes().any(|b| b.is_ascii_digit()),
        _ => true,
    }
}

/// A random key body has letters and digits; a long hyphenated word does not.
fn mixed(body: &str) -> bool {
    body.bytes().any(|b| b.is_ascii_digit()) && body.bytes().any(|b| b.is_ascii_alphabetic())
}

/// The local part and the domain of an e-mail address are each well formed.
pub fn valid_email(text: &str) -> bool {
    let Some((local, domain)) = text.split_once('@') else {
        return false;
    };
    let local_ok = !local.is_empty()
        && local.len() <= 64
        && !local.starts_with('.')
        && !local.ends_with('.')
        && !local.contains("..");
    local_ok && domain.len() <= 253
}

/// 8 to 15 digits (E.164's longest), parentheses balanced, no two separators in a row but
/// `) `.
fn valid_phone(text: &str) -> bool {
    let digits = text.bytes().filter(u8::is_ascii_digit).count();
    if !(8..=15).contains(&digits)
        || (!text.starts_with('+') && digits < 10 && !text.starts_with('0'))
    {
        return false;
    }
    let opens = text.bytes().filter(|b| *b == b'(').count();
    let closes = text.bytes().filter(|b| *b == b')').count();
    let doubled = text
        .as_bytes()
        .windows(2)
        .any(|w| !w[0].is_ascii_digit() && !w[1].is_ascii_digit() && w != b") " && w != b" (");
    opens == closes && opens <= 1 && !doubled
}

/// 13 to 19 digits, one kind of separator, a known issuer prefix, a valid Luhn digit.
pub fn valid_card(text: &str) -> bool {
    let digits: Vec<u8> = text
        .bytes()
        .filter(u8::is_ascii_digit)
        .map(|b| b - b'0')
        .collect();
    let spaces = text.contains(' ');
    let dashes = text.contains('-');
    (13..=19).contains(&digits.len()) && !(spaces && dashes) && issuer(&digits) && luhn(&digits)
}

/// Whether the digits start like a number of a card network (Visa, Mastercard, American Express,
/// Discover, JCB, Diners Club, UnionPay, Maestro).
fn issuer(digits: &[u8]) -> bool {
    let prefix = |n: usize| {
        digits
            .iter()
            .take(n)
            .fold(0u32, |acc, d| acc * 10 + u32::from(*d))
    };
    let (p1, p2, p3, p4) = (prefix(1), prefix(2), prefix(3), prefix(4));
    p1 == 4
        || (51..=55).contains(&p2)
        || (2221..=2720).contains(&p4)
        || p2 == 34
        || p2 == 37
        || p4 == 6011
        || p2 == 65
        || (644..=649).contains(&p3)
        || (3528..=3589).contains(&p4)
        || p2 == 36
        || p2 == 38
        || (300..=305).contains(&p3)
        || p2 == 62
        || matches!(p2, 50 | 56..=58 | 67)
}

/// The Luhn check over digit values (the last one the check digit).
pub fn luhn(digits: &[u8]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            let d = u32::from(d);
            if i % 2 == 1 {
                let twice = d * 2;
                if twice > 9 {
                    twice - 9
                } else {
                    twice
                }
            } else {
                d
            }
        })
        .sum();
    !digits.is_empty() && sum.is_multiple_of(10)
}

/// An IBAN (spaces allowed between characters): 15 to 34 characters, the mod-97 checksum 1.
pub fn valid_iban(text: &str) -> bool {
    let compact: Vec<u8> = text.bytes().filter(|b| *b != b' ').collect();
    if !(15..=34).contains(&compact.len()) || !compact.iter().all(u8::is_ascii_alphanumeric) {
        return false;
    }
    // The first four characters move to the end; letters count as 10..35.
    let rotated = compact[4..].iter().chain(&compact[..4]);
    let mut rest: u32 = 0;
    for &b in rotated {
        let value = match b {
            b'0'..=b'9' => u32::from(b - b'0'),
            b'A'..=b'Z' => u32::from(b - b'A') + 10,
            _ => return false,
        };
        rest = if value >= 10 {
            (rest * 100 + value) % 97
        } else {
            (rest * 10 + value) % 97
        };
    }
    rest == 1
}
