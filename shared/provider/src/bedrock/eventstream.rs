//! AWS's event-stream framing (`application/vnd.amazon.eventstream`), the body of Bedrock's
//! `ConverseStream` answers: a sequence of binary messages, each
//!
//! ```text
//! total length (u32 BE) | headers length (u32 BE) | prelude CRC-32 (u32 BE)
//! headers (name length u8, name, value type u8, value) | payload | message CRC-32 (u32 BE)
//! ```
//!
//! The decoder parses untrusted bytes: lengths are bounded ([`MAX_MESSAGE_BYTES`],
//! [`MAX_HEADERS_BYTES`]) before anything is buffered beyond them, and both CRCs are checked.

use std::fmt;

/// The largest message accepted (Bedrock's events are a few hundred bytes; a tool call's
/// arguments arrive as many small deltas).
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;
/// The largest headers section accepted.
pub const MAX_HEADERS_BYTES: usize = 16 * 1024;
/// Prelude (12 bytes) plus the trailing message CRC (4 bytes).
const OVERHEAD: usize = 16;

/// Why the bytes are not an event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// A length field outside its bounds.
    Length,
    /// The prelude's CRC does not match.
    PreludeCrc,
    /// The message's CRC does not match.
    MessageCrc,
    /// A header that cannot be parsed.
    Header,
    /// The stream ended before its last message (or inside a message).
    Truncated,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FrameError::Length => "event-stream message length out of bounds",
            FrameError::PreludeCrc => "event-stream prelude CRC mismatch",
            FrameError::MessageCrc => "event-stream message CRC mismatch",
            FrameError::Header => "malformed event-stream header",
            FrameError::Truncated => "event stream ended early",
        })
    }
}

impl std::error::Error for FrameError {}

/// One decoded message: its string headers (other header types are skipped) and payload.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Message {
    pub headers: Vec<(String, String)>,
    pub payload: Vec<u8>,
}

impl Message {
    /// The value of the string header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// An incremental decoder: bytes in as they arrive, whole messages out.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    failed: bool,
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Appends `bytes` and adds every message now complete to `out` — those before a framing
    /// error too, so the result never depends on how the bytes were split. After an error the
    /// decoder stays failed (the framing is lost).
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<Message>) -> Result<(), FrameError> {
        if self.failed {
            return Err(FrameError::Length);
        }
        self.buf.extend_from_slice(bytes);
        let mut at = 0;
        loop {
            let rest = &self.buf[at..];
            if rest.len() < 12 {
                break;
            }
            let total = be32(&rest[0..4]) as usize;
            let headers_len = be32(&rest[4..8]) as usize;
            let checked = (|| {
                if !(OVERHEAD..=MAX_MESSAGE_BYTES).contains(&total)
                    || headers_len > MAX_HEADERS_BYTES
                    || headers_len > total - OVERHEAD
                {
                    return Err(FrameError::Length);
                }
                if crc32fast::hash(&rest[0..8]) != be32(&rest[8..12]) {
                    return Err(FrameError::PreludeCrc);
                }
                Ok(())
            })();
            if let Err(e) = checked {
                self.failed = true;
                return Err(e);
            }
            if rest.len() < total {
                break;
            }
            let frame = &rest[..total];
            if crc32fast::hash(&frame[..total - 4]) != be32(&frame[total - 4..]) {
                self.failed = true;
                return Err(FrameError::MessageCrc);
            }
            let headers = match parse_headers(&frame[12..12 + headers_len]) {
                Ok(h) => h,
                Err(e) => {
                    self.failed = true;
                    return Err(e);
                }
            };
            out.push(Message {
                headers,
                payload: frame[12 + headers_len..total - 4].to_vec(),
            });
            at += total;
        }
        self.buf.drain(..at);
        Ok(())
    }

    /// Bytes received that are not yet a whole message.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

fn parse_headers(mut b: &[u8]) -> Result<Vec<(String, String)>, FrameError> {
    let mut out = Vec::new();
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], FrameError> {
        if b.len() < n {
            return Err(FrameError::Header);
        }
        let (head, tail) = b.split_at(n);
        *b = tail;
        Ok(head)
    }
    while !b.is_empty() {
        let name_len = usize::from(take(&mut b, 1)?[0]);
        let name =
            String::from_utf8(take(&mut b, name_len)?.to_vec()).map_err(|_| FrameError::Header)?;
        let ty = take(&mut b, 1)?[0];
        let fixed = match ty {
            0 | 1 => Some(0),
            2 => Some(1),
            3 => Some(2),
            4 => Some(4),
            5 | 8 => Some(8),
            9 => Some(16),
            6 | 7 => None,
            _ => return Err(FrameError::Header),
        };
        match fixed {
            Some(n) => {
                take(&mut b, n)?;
            }
            None => {
                let len = take(&mut b, 2)?;
                let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
                let value = take(&mut b, len)?;
                if ty == 7 {
                    let value =
                        String::from_utf8(value.to_vec()).map_err(|_| FrameError::Header)?;
                    out.push((name, value));
                }
            }
        }
    }
    Ok(out)
}

/// Encodes one message with string headers (what Bedrock sends; the mock upstream uses it).
/// Names longer than 255 bytes and values longer than 65,535 are cut.
pub fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    for (name, value) in headers {
        let name = &name.as_bytes()[..name.len().min(255)];
        let value = &value.as_bytes()[..value.len().min(usize::from(u16::MAX))];
        h.push(name.len() as u8);
        h.extend_from_slice(name);
        h.push(7);
        h.extend_from_slice(&(value.len() as u16).to_be_bytes());
        h.extend_from_slice(value);
    }
    let total = OVERHEAD + h.len() + payload.len();
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&(h.len() as u32).to_be_bytes());
    let prelude_crc = crc32fast::hash(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_split_anywhere() {
        let mut wire = encode(
            &[(":event-type", "messageStart"), (":message-type", "event")],
            br#"{"role":"assistant"}"#,
        );
        wire.extend(encode(&[(":event-type", "messageStop")], b"{}"));
        for cut in 0..wire.len() {
            let mut d = Decoder::new();
            let mut got = Vec::new();
            d.push(&wire[..cut], &mut got).unwrap();
            d.push(&wire[cut..], &mut got).unwrap();
            assert_eq!(got.len(), 2, "cut at {cut}");
            assert_eq!(got[0].header(":event-type"), Some("messageStart"));
            assert_eq!(got[0].payload, br#"{"role":"assistant"}"#);
            assert_eq!(got[1].header(":message-type"), None);
            assert_eq!(d.pending(), 0);
        }
    }

    #[test]
    fn messages_before_a_framing_error_are_kept_however_the_bytes_were_split() {
        // A good message, then one whose body was corrupted (found by fuzzing: delivered in one
        // piece the good message used to be lost, delivered byte by byte it was not).
        let good = encode(
            &[(":event-type", "messageStart")],
            br#"{"role":"assistant"}"#,
        );
        let mut bad = encode(&[(":event-type", "contentBlockDelta")], b"{}");
        bad[14] ^= 0x20;
        let wire = [good, bad].concat();
        let mut whole = Vec::new();
        assert_eq!(
            Decoder::new().push(&wire, &mut whole),
            Err(FrameError::MessageCrc)
        );
        let mut split = Vec::new();
        let mut d = Decoder::new();
        let error = wire
            .chunks(1)
            .find_map(|byte| d.push(byte, &mut split).err());
        assert_eq!(error, Some(FrameError::MessageCrc));
        assert_eq!(whole, split);
        assert_eq!(whole.len(), 1);
        assert_eq!(whole[0].header(":event-type"), Some("messageStart"));
    }

    #[test]
    fn bad_crcs_and_lengths_are_refused() {
        let wire = encode(&[(":event-type", "x")], b"{}");
        let mut bad = wire.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert_eq!(
            Decoder::new().push(&bad, &mut Vec::new()),
            Err(FrameError::MessageCrc)
        );
        let mut bad = wire.clone();
        bad[9] ^= 1;
        assert_eq!(
            Decoder::new().push(&bad, &mut Vec::new()),
            Err(FrameError::PreludeCrc)
        );
        let mut huge = Vec::new();
        huge.extend_from_slice(&(u32::MAX).to_be_bytes());
        huge.extend_from_slice(&0u32.to_be_bytes());
        let crc = crc32fast::hash(&huge);
        huge.extend_from_slice(&crc.to_be_bytes());
        let mut d = Decoder::new();
        assert_eq!(d.push(&huge, &mut Vec::new()), Err(FrameError::Length));
        assert!(
            d.push(&wire, &mut Vec::new()).is_err(),
            "a failed decoder stays failed"
        );
    }

    #[test]
    fn a_message_up_to_its_bound_is_read_and_one_byte_more_refused() {
        for total in [MAX_MESSAGE_BYTES - 1, MAX_MESSAGE_BYTES] {
            let wire = encode(&[], &vec![b'x'; total - OVERHEAD]);
            assert_eq!(wire.len(), total);
            let mut got = Vec::new();
            Decoder::new().push(&wire, &mut got).unwrap();
            assert_eq!(got[0].payload.len(), total - OVERHEAD, "{total} bytes");
        }
        let over = encode(&[], &vec![b'x'; MAX_MESSAGE_BYTES + 1 - OVERHEAD]);
        let mut d = Decoder::new();
        // Refused from its prelude, before the rest is buffered.
        assert_eq!(
            d.push(&over[..12], &mut Vec::new()),
            Err(FrameError::Length)
        );
        assert_eq!(
            Decoder::new().push(&over, &mut Vec::new()),
            Err(FrameError::Length)
        );
    }

    /// A prelude announcing `total` and `headers_len`, with its CRC, then `total - 12` bytes.
    fn frame(total: u32, headers_len: u32) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&total.to_be_bytes());
        out.extend_from_slice(&headers_len.to_be_bytes());
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out.resize(total as usize, 0);
        out
    }

    #[test]
    fn the_headers_fit_their_bound_and_their_message() {
        let refused = |total: usize, headers_len: usize| {
            Decoder::new().push(&frame(total as u32, headers_len as u32), &mut Vec::new())
        };
        // Headers longer than the message leaves them, or than their own bound.
        assert_eq!(refused(40, 25), Err(FrameError::Length));
        let over = MAX_HEADERS_BYTES + 1;
        assert_eq!(refused(over + OVERHEAD + 8, over), Err(FrameError::Length));
        // Up to both bounds exactly: a message with no payload, and one with the largest
        // headers section.
        let name = "n".repeat(200);
        let value = "v".repeat(300);
        let headers: Vec<(&str, &str)> = vec![(name.as_str(), value.as_str()); 32];
        let largest = encode(&headers, b"");
        let headers_len = largest.len() - OVERHEAD;
        assert!(headers_len <= MAX_HEADERS_BYTES && headers_len > 2_000);
        let mut got = Vec::new();
        Decoder::new().push(&largest, &mut got).unwrap();
        assert_eq!((got[0].headers.len(), got[0].payload.len()), (32, 0));
        // One more header of 5 bytes besides its value: length, name, type, value length.
        let pad = MAX_HEADERS_BYTES - headers_len - 5;
        let exact = encode(
            &[headers.as_slice(), &[("p", &"x".repeat(pad))]].concat(),
            b"{}",
        );
        assert_eq!(exact.len() - OVERHEAD - 2, MAX_HEADERS_BYTES);
        let mut got = Vec::new();
        Decoder::new().push(&exact, &mut got).unwrap();
        assert_eq!(got[0].payload, b"{}");
    }

    #[test]
    fn headers_of_every_type_are_skipped_by_their_size_and_strings_kept() {
        // (type, value bytes after the type): bool true/false, byte, short, int, long,
        // byte array (length-prefixed), timestamp, uuid; then one string.
        let values: [(u8, Vec<u8>); 9] = [
            (0, vec![]),
            (1, vec![]),
            (2, vec![7]),
            (3, vec![0, 7]),
            (4, vec![0, 0, 0, 7]),
            (5, vec![0; 8]),
            (6, vec![0, 3, 1, 2, 3]),
            (8, vec![0; 8]),
            (9, vec![0; 16]),
        ];
        let mut raw = Vec::new();
        for (ty, value) in &values {
            raw.extend_from_slice(&[1, b'h', *ty]);
            raw.extend_from_slice(value);
        }
        raw.extend_from_slice(&[1, b's', 7, 0, 2, b'o', b'k']);
        // The string-only encoder's message with these headers in place of its own.
        let mut wire = frame((OVERHEAD + raw.len() + 2) as u32, raw.len() as u32);
        wire.truncate(12);
        wire.extend_from_slice(&raw);
        wire.extend_from_slice(b"{}");
        let crc = crc32fast::hash(&wire);
        wire.extend_from_slice(&crc.to_be_bytes());
        let mut got = Vec::new();
        Decoder::new().push(&wire, &mut got).unwrap();
        assert_eq!(got[0].headers, [("s".to_owned(), "ok".to_owned())]);
        assert_eq!(got[0].payload, b"{}");
        // An unknown type is a malformed header.
        let mut bad = raw.clone();
        bad[2] = 10;
        let mut wire = frame((OVERHEAD + bad.len()) as u32, bad.len() as u32);
        wire.truncate(12);
        wire.extend_from_slice(&bad);
        let crc = crc32fast::hash(&wire);
        wire.extend_from_slice(&crc.to_be_bytes());
        assert_eq!(
            Decoder::new().push(&wire, &mut Vec::new()),
            Err(FrameError::Header)
        );
    }

    #[test]
    fn the_bytes_of_an_unfinished_message_are_pending() {
        let wire = encode(&[(":event-type", "x")], b"{}");
        let mut d = Decoder::new();
        d.push(&wire[..wire.len() - 3], &mut Vec::new()).unwrap();
        assert_eq!(d.pending(), wire.len() - 3);
    }

    #[test]
    fn each_framing_error_says_what_it_is() {
        let words: Vec<String> = [
            FrameError::Length,
            FrameError::PreludeCrc,
            FrameError::MessageCrc,
            FrameError::Header,
            FrameError::Truncated,
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            words,
            [
                "event-stream message length out of bounds",
                "event-stream prelude CRC mismatch",
                "event-stream message CRC mismatch",
                "malformed event-stream header",
                "event stream ended early"
            ]
        );
    }
}
