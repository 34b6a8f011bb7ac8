//! An incremental Server-Sent Events decoder.
//!
//! Feed bytes as they arrive, in chunks of any size; complete events come out. Handles lines
//! split across chunks, the three line endings the SSE standard allows (`\n`, `\r\n` and a
//! lone `\r`, even when a `\r\n` is split between two chunks), comment lines (`: ping`),
//! multi-line `data:` (joined with `\n`), the optional single space after the colon, and
//! `id:`/`retry:` fields (ignored). A block without any `data:` line is not an event (as the SSE
//! standard says).

/// One decoded event: the `event:` name if any, and the data lines joined with `\n`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

/// Incremental SSE decoder. See the module docs.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// The incomplete last line. It holds no `\n`, so a push searches only the bytes it adds:
    /// a long line fed in small chunks costs linear time, not quadratic.
    buf: Vec<u8>,
    event: Option<String>,
    data: String,
    has_data: bool,
    /// The last chunk ended with a `\r` (a line end): a `\n` opening the next one belongs to it.
    skip_lf: bool,
}

impl SseDecoder {
    pub fn new() -> SseDecoder {
        SseDecoder::default()
    }

    /// Decodes the complete events in `bytes` (plus what was buffered before).
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        self.push_into(bytes, &mut out);
        out
    }

    /// Like [`SseDecoder::push`], appending to `out`.
    pub fn push_into(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) {
        if self.skip_lf && !bytes.is_empty() {
            self.skip_lf = false;
            if bytes[0] == b'\n' {
                bytes = &bytes[1..];
            }
        }
        let mut start = 0;
        let from = self.buf.len();
        self.buf.extend_from_slice(bytes);
        let mut at = from;
        while let Some(rel) = self.buf[at..]
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
        {
            let end = at + rel;
            let line = String::from_utf8_lossy(&self.buf[start..end]).into_owned();
            self.line(&line, out);
            start = end + 1;
            if self.buf[end] == b'\r' {
                match self.buf.get(start) {
                    Some(b'\n') => start += 1,
                    Some(_) => {}
                    None => self.skip_lf = true,
                }
            }
            at = start;
        }
        self.buf.drain(..start);
    }

    /// The stream ended: a last line without a newline and a last event without its blank
    /// line are still delivered.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let mut out = Vec::new();
        self.skip_lf = false;
        if !self.buf.is_empty() {
            // (It holds no line ending: every one ends a line as it arrives.)
            let rest = std::mem::take(&mut self.buf);
            let line = String::from_utf8_lossy(&rest).into_owned();
            self.line(&line, &mut out);
        }
        self.dispatch(&mut out);
        out.pop()
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        if self.has_data {
            out.push(SseEvent {
                event: self.event.take(),
                data: std::mem::take(&mut self.data),
            });
        }
        self.event = None;
        self.data.clear();
        self.has_data = false;
    }

    fn line(&mut self, line: &str, out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
    }
}

/// Renders one SSE event (`event:` line only when named), terminated by a blank line.
pub(crate) fn write_event(out: &mut Vec<u8>, event: Option<&str>, data: &str) {
    if let Some(name) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(data.as_bytes());
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_string),
            data: data.to_string(),
        }
    }

    /// Found by the `provider_stream` fuzz target: every push searched the whole pending line
    /// again, so a long line arriving in small chunks took quadratic time (this 256 KiB event
    /// in 1-byte chunks: ~3·10¹⁰ byte comparisons, minutes in a debug build). Now each byte is
    /// searched once (milliseconds).
    #[test]
    fn a_long_line_in_tiny_chunks_is_decoded_in_linear_time() {
        let mut d = SseDecoder::new();
        let mut events = Vec::new();
        let data = vec![b'x'; 256 << 10];
        let started = std::time::Instant::now();
        d.push_into(b"data: ", &mut events);
        for chunk in data.chunks(1) {
            d.push_into(chunk, &mut events);
        }
        d.push_into(b"\n\n", &mut events);
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data.len(), data.len());
    }

    #[test]
    fn decodes_named_and_unnamed_events() {
        let mut d = SseDecoder::new();
        let got = d.push(b"event: ping\ndata: {}\n\ndata: x\n\n");
        assert_eq!(got, vec![ev(Some("ping"), "{}"), ev(None, "x")]);
    }

    #[test]
    fn crlf_comments_and_multiline_data() {
        let mut d = SseDecoder::new();
        let got = d.push(b": ping\r\ndata: a\r\ndata:b\r\nid: 7\r\nretry: 5\r\n\r\n");
        assert_eq!(got, vec![ev(None, "a\nb")]);
    }

    #[test]
    fn every_split_point_gives_the_same_events() {
        let stream = b"event: a\r\ndata: 1\r\n\r\n: c\n\ndata: two\ndata: lines\n\nevent: b\ndata: \xc3\xa9\n\n";
        let whole = SseDecoder::new().push(stream);
        assert_eq!(whole.len(), 3);
        for i in 0..=stream.len() {
            let mut d = SseDecoder::new();
            let mut got = d.push(&stream[..i]);
            got.extend(d.push(&stream[i..]));
            assert_eq!(got, whole, "split at {i}");
        }
        // byte by byte
        let mut d = SseDecoder::new();
        let mut got = Vec::new();
        for b in stream {
            got.extend(d.push(std::slice::from_ref(b)));
        }
        assert_eq!(got, whole);
    }

    #[test]
    fn lone_cr_line_endings_decode_like_lf_even_split_between_chunks() {
        let lf = b"event: a\ndata: 1\ndata: 2\n\ndata: 3\n\n";
        let expected = vec![ev(Some("a"), "1\n2"), ev(None, "3")];
        let cr: Vec<u8> = lf
            .iter()
            .map(|&b| if b == b'\n' { b'\r' } else { b })
            .collect();
        assert_eq!(SseDecoder::new().push(&cr), expected);
        // A `\r\n` split between two chunks is one line ending, not two.
        let mut d = SseDecoder::new();
        let mut events = d.push(b"data: 1\r");
        events.extend(d.push(b"\n\r"));
        events.extend(d.push(b"\ndata: 2\r\r"));
        events.extend(d.push(b"data: 3\r"));
        events.extend(d.push(b""));
        events.extend(d.push(b"\r"));
        assert_eq!(events, vec![ev(None, "1"), ev(None, "2"), ev(None, "3")]);
        assert_eq!(d.finish(), None);
        // A `\r` then other bytes: the line ended at the `\r`.
        let mut d = SseDecoder::new();
        let mut events = d.push(b"data: x\r");
        events.extend(d.push(b"data: y\n\n"));
        assert_eq!(events, vec![ev(None, "x\ny")]);
    }

    #[test]
    fn finish_flushes_an_unterminated_event() {
        let mut d = SseDecoder::new();
        assert!(d.push(b"data: [DONE]").is_empty());
        assert_eq!(d.finish(), Some(ev(None, "[DONE]")));
        assert_eq!(d.finish(), None);
    }

    #[test]
    fn block_without_data_is_not_an_event() {
        let mut d = SseDecoder::new();
        assert!(d.push(b"event: x\n\n").is_empty());
        assert_eq!(d.push(b"data: y\n\n"), vec![ev(None, "y")]);
    }
}
