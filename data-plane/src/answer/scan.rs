//! One pass over the bytes of an OpenAI completion answer (`choices`, usage): the common answer
//! checked and read without building anything, in about half the instructions of the typed
//! read.
//!
//! The pass gives a verdict only where it is sure to agree with the typed read in the parent
//! module: a body it accepts is one JSON object that the typed read accepts too, with the same
//! emptiness and the same usage text. Anything else (not valid JSON, an escaped key, an escaped
//! `text`, a repeated field, a choice that is not an object, nesting deeper than
//! [`MAX_DEPTH`]…) gives no verdict, and the typed read decides. The fuzz target `answer_check`
//! holds the two to that.

use std::ops::Range;

/// Nesting the pass follows; deeper answers are left to the typed read (whose own limit is
/// higher).
const MAX_DEPTH: u32 = 100;

/// What the pass found in an answer it could read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Completion<'a> {
    /// Its choices are there and say nothing (none, or each without content of any kind).
    pub empty: bool,
    /// The raw text of its top-level usage object (the last one when the key repeats).
    pub usage: Option<&'a str>,
    /// That object's figures when each is plain (see [`Scan::usage`]).
    pub figures: Option<Figures>,
}

/// An OpenAI usage object's prompt, completion and cached-prompt figures (`None`: not there or
/// `null`).
pub(crate) type Figures = [Option<u64>; 3];

/// The largest count read here: nine digits, always within what an upstream may report.
const MAX_DIGITS: usize = 9;

/// The verdict on `text`, an answer to a completion request whose usage object is under
/// `usage_key`; `None` when the typed read must decide.
pub(crate) fn completion<'a>(text: &'a str, usage_key: &str) -> Option<Completion<'a>> {
    let mut scan = Scan {
        bytes: text.as_bytes(),
        at: 0,
        depth: 0,
    };
    let mut choices = Choices::Absent;
    let mut usage = None;
    if !scan.eat(b'{') {
        return None;
    }
    scan.object(|scan, key| {
        if key == b"choices" {
            if choices != Choices::Absent {
                return None;
            }
            choices = if scan.null() {
                Choices::Null
            } else if scan.choices()? {
                Choices::AllBlank
            } else {
                Choices::Content
            };
        } else if key == usage_key.as_bytes() {
            usage = Some(scan.usage()?);
        } else {
            scan.value()?;
        }
        Some(())
    })?;
    scan.skip_space();
    if scan.at != scan.bytes.len() {
        return None;
    }
    let (usage, figures) = usage.map_or((None, None), |(range, figures)| {
        (Some(&text[range]), figures)
    });
    Some(Completion {
        empty: choices == Choices::AllBlank,
        usage,
        figures,
    })
}

/// What the `choices` key held.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Choices {
    Absent,
    Null,
    AllBlank,
    Content,
}

/// A usage figure as the pass reads it (the read itself fails only on bytes that are not JSON).
enum Figure {
    /// A count the pass can take as it is (`None`: `null`, or not there).
    Plain(Option<u64>),
    /// Anything else: the usage read decides.
    Other,
}

/// A cursor over JSON bytes; each reading method is at the start of its value (or of the space
/// before it) and ends after it, and returns `None` for anything it does not accept.
struct Scan<'a> {
    bytes: &'a [u8],
    at: usize,
    depth: u32,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    /// Whether the next byte after space is `c` (then consumed).
    fn eat(&mut self, c: u8) -> bool {
        self.skip_space();
        let found = self.peek() == Some(c);
        self.at += usize::from(found);
        found
    }

    /// Whether the next value is `null` (then consumed).
    fn null(&mut self) -> bool {
        self.skip_space();
        self.word(b"null").is_some()
    }

    /// The choices array: whether every choice says nothing.
    fn choices(&mut self) -> Option<bool> {
        if !self.eat(b'[') {
            return None;
        }
        let mut all_blank = true;
        self.array(|scan| {
            all_blank &= scan.choice()?;
            Some(())
        })?;
        Some(all_blank)
    }

    /// One choice, an object: whether it says nothing (its message has no content of any kind;
    /// without a message, its `text` is empty or absent).
    fn choice(&mut self) -> Option<bool> {
        if !self.eat(b'{') {
            return None;
        }
        let (mut message, mut text) = (None, None);
        let (mut seen_message, mut seen_text) = (false, false);
        self.object(|scan, key| {
            match key {
                b"message" => {
                    if std::mem::replace(&mut seen_message, true) {
                        return None;
                    }
                    if !scan.null() {
                        message = Some(scan.message()?);
                    }
                }
                b"text" => {
                    if std::mem::replace(&mut seen_text, true) {
                        return None;
                    }
                    if !scan.null() {
                        if !scan.eat(b'"') {
                            return None;
                        }
                        let (range, escaped) = scan.string_rest()?;
                        if escaped {
                            return None;
                        }
                        text = Some(range.is_empty());
                    }
                }
                _ => scan.value()?,
            }
            Some(())
        })?;
        Some(message.or(text).unwrap_or(true))
    }

    /// A choice's message, an object: whether none of its content, tool calls, function call,
    /// refusal or audio has anything in it.
    fn message(&mut self) -> Option<bool> {
        const PARTS: [&[u8]; 5] = [
            b"content",
            b"tool_calls",
            b"function_call",
            b"refusal",
            b"audio",
        ];
        if !self.eat(b'{') {
            return None;
        }
        let mut seen = [false; PARTS.len()];
        let mut blank = true;
        self.object(|scan, key| {
            let Some(part) = PARTS.iter().position(|p| *p == key) else {
                return scan.value();
            };
            if std::mem::replace(&mut seen[part], true) {
                return None;
            }
            let range = scan.raw_value()?;
            blank &= matches!(&scan.bytes[range], b"null" | b"\"\"" | b"[]");
            Some(())
        })?;
        Some(blank)
    }

    /// A usage object: its range, and its figures when the object is plain — each figure
    /// (`prompt_tokens`, `completion_tokens`, `prompt_tokens_details.cached_tokens`) a count of at
    /// most [`MAX_DIGITS`] digits or `null`, none repeated, the details an object or `null`.
    /// Any other value is only read.
    fn usage(&mut self) -> Option<(Range<usize>, Option<Figures>)> {
        self.skip_space();
        let start = self.at;
        if !self.eat(b'{') {
            self.value()?;
            return Some((start..self.at, None));
        }
        let mut figures: [Option<Option<u64>>; 3] = [None; 3];
        let mut plain = true;
        self.object(|scan, key| {
            let slot = match key {
                b"prompt_tokens" => 0,
                b"completion_tokens" => 1,
                b"prompt_tokens_details" => 2,
                _ => return scan.value(),
            };
            let figure = if slot == 2 {
                scan.details()?
            } else {
                scan.count()?
            };
            match figure {
                Figure::Plain(figure) if figures[slot].is_none() => figures[slot] = Some(figure),
                _ => plain = false,
            }
            Some(())
        })?;
        let figures = plain.then(|| figures.map(Option::flatten));
        Some((start..self.at, figures))
    }

    /// A details object's `cached_tokens` as a [`Figure`]: plain when the details are `null` or
    /// an object whose `cached_tokens` (if any, once) is plain.
    fn details(&mut self) -> Option<Figure> {
        if self.null() {
            return Some(Figure::Plain(None));
        }
        if !self.eat(b'{') {
            self.value()?;
            return Some(Figure::Other);
        }
        let mut cached = None;
        let mut plain = true;
        self.object(|scan, key| {
            if key != b"cached_tokens" {
                return scan.value();
            }
            match scan.count()? {
                Figure::Plain(figure) if cached.is_none() => cached = Some(figure),
                _ => plain = false,
            }
            Some(())
        })?;
        Some(match plain {
            true => Figure::Plain(cached.flatten()),
            false => Figure::Other,
        })
    }

    /// A figure: plain for a count of at most [`MAX_DIGITS`] digits or `null`.
    fn count(&mut self) -> Option<Figure> {
        if self.null() {
            return Some(Figure::Plain(None));
        }
        let range = self.raw_value()?;
        let digits = &self.bytes[range];
        if digits.len() > MAX_DIGITS || !digits.iter().all(u8::is_ascii_digit) {
            return Some(Figure::Other);
        }
        let n = digits
            .iter()
            .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
        Some(Figure::Plain(Some(n)))
    }

    /// The range of the next value (space before it left out).
    fn raw_value(&mut self) -> Option<Range<usize>> {
        self.skip_space();
        let start = self.at;
        self.value()?;
        Some(start..self.at)
    }

    /// Any one value, checked and skipped.
    fn value(&mut self) -> Option<()> {
        self.skip_space();
        match self.peek()? {
            b'"' => {
                self.at += 1;
                self.string_rest().map(drop)
            }
            b'{' => {
                self.at += 1;
                self.object(|scan, _| scan.value())
            }
            b'[' => {
                self.at += 1;
                self.array(Scan::value)
            }
            b't' => self.word(b"true"),
            b'f' => self.word(b"false"),
            b'n' => self.word(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// The members of an object whose `{` was just read, each key (unescaped keys only) handed
    /// to `member` with the cursor before its value, which `member` reads.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.items(b'}', |scan| {
            if !scan.eat(b'"') {
                return None;
            }
            let (key, escaped) = scan.string_rest()?;
            if escaped || !scan.eat(b':') {
                return None;
            }
            let bytes = scan.bytes;
            member(scan, &bytes[key])
        })
    }

    /// The elements of an array whose `[` was just read, each read by `element`.
    fn array(&mut self, element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.items(b']', element)
    }

    /// The comma-separated items of an object or array whose opening byte was just read, up to
    /// `close`, one nesting level deeper.
    fn items(&mut self, close: u8, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        if !self.eat(close) {
            loop {
                item(self)?;
                if self.eat(b',') {
                    continue;
                }
                if self.eat(close) {
                    break;
                }
                return None;
            }
        }
        self.depth -= 1;
        Some(())
    }

    /// The rest of a string whose `"` was just read: the range of its content and whether it
    /// has escapes. Refused: a control character, an unknown escape, a `\u` without four hex
    /// digits, no closing quote.
    fn string_rest(&mut self) -> Option<(Range<usize>, bool)> {
        let start = self.at;
        let mut escaped = false;
        loop {
            self.skip_plain();
            let c = *self.bytes.get(self.at)?;
            self.at += 1;
            match c {
                b'"' => return Some((start..self.at - 1, escaped)),
                b'\\' => {
                    escaped = true;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 1,
                        b'u' => {
                            let hex = self.bytes.get(self.at + 1..self.at + 5)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.at += 5;
                        }
                        _ => return None,
                    }
                }
                0..=0x1f => return None,
                _ => {}
            }
        }
    }

    /// Skips the bytes of a string that need no look, eight at a time: up to the next `"`, `\`
    /// or control character (or the last few bytes).
    fn skip_plain(&mut self) {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        // A byte's high bit is set in `zero(x)` when it is 0 in `x`; the lowest such byte is
        // exact (a borrow only runs upward from a byte that is itself 0), so the lowest byte
        // flagged across the three tests is the first that needs a look.
        let zero = |x: u64| x.wrapping_sub(ONES) & !x;
        while let Some(Ok(chunk)) = self
            .bytes
            .get(self.at..self.at + 8)
            .map(<[u8; 8]>::try_from)
        {
            let v = u64::from_le_bytes(chunk);
            let control = v.wrapping_sub(ONES * 0x20) & !v;
            let found = (zero(v ^ (ONES * u64::from(b'"')))
                | zero(v ^ (ONES * u64::from(b'\\')))
                | control)
                & HIGH;
            if found != 0 {
                self.at += found.trailing_zeros() as usize / 8;
                return;
            }
            self.at += 8;
        }
    }

    /// A number: `-`, then `0` or digits not starting with `0`, an optional fraction and an
    /// optional exponent, each with at least one digit.
    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.digits().then_some(())?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            self.digits().then_some(())?;
        }
        Some(())
    }

    /// Skips a run of digits: whether there was at least one.
    fn digits(&mut self) -> bool {
        let start = self.at;
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
        self.at > start
    }

    fn word(&mut self, word: &[u8]) -> Option<()> {
        self.bytes[self.at..].starts_with(word).then_some(())?;
        self.at += word.len();
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(text: &str) -> Option<(bool, Option<&str>)> {
        completion(text, "usage").map(|c| (c.empty, c.usage))
    }

    fn figures(usage: &str) -> Option<Figures> {
        let text = format!(r#"{{"choices":[],"usage":{usage}}}"#);
        completion(&text, "usage").and_then(|c| c.figures)
    }

    #[test]
    fn plain_usage_figures_are_read_and_the_rest_left_to_the_usage_read() {
        assert_eq!(
            figures(
                r#"{"prompt_tokens":17,"completion_tokens":4,"total_tokens":21,"prompt_tokens_details":{"audio_tokens":0,"cached_tokens":3}}"#
            ),
            Some([Some(17), Some(4), Some(3)])
        );
        assert_eq!(
            figures(r#"{"completion_tokens":null,"prompt_tokens_details":null}"#),
            Some([None, None, None])
        );
        assert_eq!(figures("{}"), Some([None, None, None]));
        assert_eq!(
            figures(r#"{"prompt_tokens":999999999}"#),
            Some([Some(999_999_999), None, None])
        );
        for usage in [
            r#"{"prompt_tokens":1000000000}"#,
            r#"{"prompt_tokens":1.0}"#,
            r#"{"prompt_tokens":-1}"#,
            r#"{"prompt_tokens":"7"}"#,
            r#"{"prompt_tokens":1,"prompt_tokens":2}"#,
            r#"{"prompt_tokens_details":{"cached_tokens":1,"cached_tokens":2}}"#,
            r#"{"prompt_tokens_details":{"cached_tokens":1e2}}"#,
            r#"{"prompt_tokens_details":[]}"#,
            r#"{"prompt_tokens_details":null,"prompt_tokens_details":{}}"#,
            "[]",
            "null",
        ] {
            assert_eq!(figures(usage), None, "{usage}");
        }
    }

    #[test]
    fn a_common_answer_is_read_with_its_usage() {
        let body = r#"{"choices":[{"finish_reason":"stop","index":0,"logprobs":null,"message":{"content":"Hello from mock","refusal":null,"role":"assistant"}}],"created":1796499157,"id":"chatcmpl-mock-1","model":"gpt-4o-mini","object":"chat.completion","usage":{"completion_tokens":4,"prompt_tokens":17,"total_tokens":21}}"#;
        assert_eq!(
            verdict(body),
            Some((
                false,
                Some(r#"{"completion_tokens":4,"prompt_tokens":17,"total_tokens":21}"#)
            ))
        );
        let spaced = " {\n \"usage\" : [ 1 , -2.5e+3 , true ] ,\t\"choices\" : [ ] }\r\n";
        assert_eq!(
            verdict(spaced),
            Some((true, Some("[ 1 , -2.5e+3 , true ]")))
        );
    }

    #[test]
    fn emptiness_follows_each_choice_s_message_or_text() {
        for (body, empty) in [
            (r#"{"choices":[]}"#, true),
            (r#"{"choices":null}"#, false),
            (r#"{"object":"list"}"#, false),
            (r#"{"choices":[{}]}"#, true),
            (r#"{"choices":[{"text":""}]}"#, true),
            (r#"{"choices":[{"text":"x"}]}"#, false),
            (r#"{"choices":[{"text":null,"message":null}]}"#, true),
            (
                r#"{"choices":[{"message":{"content":""},"text":"x"}]}"#,
                true,
            ),
            (r#"{"choices":[{"message":null,"text":"x"}]}"#, false),
            (
                r#"{"choices":[{"message":{"content":null,"tool_calls":[],"refusal":"","audio":null}}]}"#,
                true,
            ),
            (r#"{"choices":[{"message":{"content":[ ]}}]}"#, false),
            (r#"{"choices":[{"message":{"function_call":{}}}]}"#, false),
            (
                r#"{"choices":[{"message":{"content":""}},{"message":{"content":"x"}}]}"#,
                false,
            ),
        ] {
            assert_eq!(verdict(body).map(|v| v.0), Some(empty), "{body}");
        }
    }

    #[test]
    fn nesting_is_followed_up_to_its_limit_and_left_to_the_typed_read_beyond() {
        // The answer object is one level; `k` arrays inside it are `k` more.
        let nested = |k: u32| {
            let k = k as usize;
            format!(r#"{{"choices":[],"a":{}{}}}"#, "[".repeat(k), "]".repeat(k))
        };
        for levels in [MAX_DEPTH - 1, MAX_DEPTH] {
            let text = nested(levels - 1);
            assert_eq!(verdict(&text), Some((true, None)), "{levels} levels");
        }
        assert_eq!(
            verdict(&nested(MAX_DEPTH)),
            None,
            "{} levels",
            MAX_DEPTH + 1
        );
    }

    #[test]
    fn what_the_pass_is_unsure_of_is_left_to_the_typed_read() {
        for body in [
            "",
            "[]",
            r#"{"choices":[]} x"#,
            r#"{"choices":[],}"#,
            r#"{"choices":[1]}"#,
            r#"{"choices":[[]]}"#,
            r#"{"choices":{}}"#,
            r#"{"choices":null,"choices":[]}"#,
            r#"{"ch\u006fices":[]}"#,
            r#"{"choices":[{"text":"\n"}]}"#,
            r#"{"choices":[{"text":1}]}"#,
            r#"{"choices":[{"message":[]}]}"#,
            r#"{"choices":[{"message":{"content":"a","content":"b"}}]}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":1e}"#,
            r#"{"a":-}"#,
            r#"{"a":tru}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":"\u12G4"}"#,
            "{\"a\":\"\u{1}\"}",
            r#"{"a":"unterminated}"#,
        ] {
            assert_eq!(verdict(body), None, "{body}");
        }
        // The eight-at-a-time skip stops at the first byte that needs a look, wherever it is.
        for n in 0..20 {
            let pad = "é".repeat(n % 3) + &"a".repeat(n);
            let text = format!(r#"{{"id":"{pad}","choices":[{{"text":"{pad}"}}]}}"#);
            assert_eq!(verdict(&text).map(|v| v.0), Some(n == 0), "{text}");
            let escaped = format!(r#"{{"id":"{pad}\"{pad}\\","choices":[]}}"#);
            assert_eq!(verdict(&escaped).map(|v| v.0), Some(true), "{escaped}");
            let control = format!("{{\"id\":\"{pad}\t{pad}\",\"choices\":[]}}");
            assert_eq!(verdict(&control), None, "{control}");
        }
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(99), "]".repeat(99));
        assert!(verdict(&deep).is_some());
        let deeper = format!("{{\"a\":{}{}}}", "[".repeat(100), "]".repeat(100));
        assert_eq!(verdict(&deeper), None);
    }
}
