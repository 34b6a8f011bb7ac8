//! The gateway's ids of files and batches. A file or batch lives on one channel, so its id says
//! which: the gateway's id wraps the upstream's with the channel and the token that made it, and
//! a truncated HMAC-SHA256 tag under the fleet's id key, so no client can make an id that names
//! another channel or another token. Every later call about the object is routed by its id
//! alone: no database on the request path.
//!
//! An id is the kind's own prefix (OpenAI's `file-`, `batch_`; Anthropic's `msgbatch_`, so SDKs
//! and people still recognise it), then `sy1`, then base64url (no padding) of
//! `channel (8 bytes, big-endian) ‖ token (8) ‖ upstream id ‖ tag (12)`. The tag covers the kind
//! too: a file's id is no batch's id. Parsing is strict and bounded: anything else — a wrong
//! prefix, a bad length, a character outside base64url, an upstream id that is not printable
//! ASCII, a tag that does not match — is no id at all.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use switchyard_engine::{ChannelId, TokenId};

/// The longest upstream id the gateway wraps (OpenAI's and Anthropic's are under 40).
pub const MAX_UPSTREAM_ID: usize = 160;
/// Bytes of the HMAC-SHA256 tag kept (96 bits).
const TAG_LEN: usize = 12;
/// The version mark after the kind's prefix.
const VERSION: &str = "sy1";
/// The longest id [`decode`] reads: the longest one [`encode`] makes.
pub const MAX_ID_LEN: usize = 12 + VERSION.len() + (16 + MAX_UPSTREAM_ID + TAG_LEN).div_ceil(3) * 4;

/// What an id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An OpenAI file (`/v1/files`).
    File,
    /// An OpenAI batch (`/v1/batches`).
    Batch,
    /// An Anthropic message batch (`/v1/messages/batches`).
    MessageBatch,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::File, Kind::Batch, Kind::MessageBatch];

    /// The prefix the kind's ids start with, upstream and here alike.
    pub fn prefix(self) -> &'static str {
        match self {
            Kind::File => "file-",
            Kind::Batch => "batch_",
            Kind::MessageBatch => "msgbatch_",
        }
    }

    /// The object's name in errors ("No such file").
    pub fn noun(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Batch => "batch",
            Kind::MessageBatch => "message batch",
        }
    }

    fn domain(self) -> u8 {
        match self {
            Kind::File => 1,
            Kind::Batch => 2,
            Kind::MessageBatch => 3,
        }
    }
}

/// The key ids are tagged under: the same on every proxy of a fleet, never logged.
#[derive(Clone)]
pub struct IdKey([u8; 32]);

impl IdKey {
    pub fn new(bytes: [u8; 32]) -> IdKey {
        IdKey(bytes)
    }

    /// The key derived from a fleet-wide secret (the fleet token, or the operator's own id
    /// secret): HMAC-SHA256 of a fixed label under it, so the secret itself is never the key.
    pub fn derived(secret: &str) -> IdKey {
        let mut mac = mac_of(secret.as_bytes());
        mac.update(b"switchyard object ids v1");
        IdKey(mac.finalize().into_bytes().into())
    }

    /// A key of this process alone (standalone without a configured secret): its ids last until
    /// the process restarts.
    pub fn random() -> IdKey {
        let mut bytes = [0u8; 32];
        if getrandom::fill(&mut bytes).is_err() {
            // No system randomness: the clock and the process id still make ids that no client
            // can predict from outside this host; worse than random, never a constant.
            let seed = format!("{:?}{}", std::time::SystemTime::now(), std::process::id());
            return IdKey::derived(&seed);
        }
        IdKey(bytes)
    }

    fn tag(&self, kind: Kind, payload: &[u8]) -> [u8; TAG_LEN] {
        let mut mac = mac_of(&self.0);
        mac.update(&[kind.domain()]);
        mac.update(payload);
        let full = mac.finalize().into_bytes();
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&full[..TAG_LEN]);
        tag
    }
}

impl std::fmt::Debug for IdKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdKey(..)")
    }
}

/// HMAC-SHA256 under `key`, its key block made as HMAC itself makes it (a key longer than the
/// block is hashed first, a shorter one padded with zeros), so no key length can fail.
fn mac_of(key: &[u8]) -> Hmac<Sha256> {
    let mut block = [0u8; 64];
    if key.len() > block.len() {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    <Hmac<Sha256> as KeyInit>::new(&block.into())
}

/// What an id says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectId {
    pub channel: ChannelId,
    pub token: TokenId,
    /// The upstream's own id of the object.
    pub upstream: String,
}

/// Whether `upstream` is an id the gateway wraps: 1 to [`MAX_UPSTREAM_ID`] printable ASCII
/// characters, none of them a space.
pub fn wrappable(upstream: &str) -> bool {
    (1..=MAX_UPSTREAM_ID).contains(&upstream.len())
        && upstream.bytes().all(|b| b.is_ascii_graphic())
}

/// The gateway's id of `id`'s object; `None` when its upstream id is not [`wrappable`].
pub fn encode(key: &IdKey, kind: Kind, id: &ObjectId) -> Option<String> {
    if !wrappable(&id.upstream) {
        return None;
    }
    let mut bytes = Vec::with_capacity(16 + id.upstream.len() + TAG_LEN);
    bytes.extend_from_slice(&id.channel.to_be_bytes());
    bytes.extend_from_slice(&id.token.to_be_bytes());
    bytes.extend_from_slice(id.upstream.as_bytes());
    let tag = key.tag(kind, &bytes);
    bytes.extend_from_slice(&tag);
    let mut out = String::with_capacity(MAX_ID_LEN);
    out.push_str(kind.prefix());
    out.push_str(VERSION);
    URL_SAFE_NO_PAD.encode_string(&bytes, &mut out);
    Some(out)
}

/// What the gateway's id `text` of a `kind` says, when it is one this fleet made.
pub fn decode(key: &IdKey, kind: Kind, text: &str) -> Option<ObjectId> {
    if text.len() > MAX_ID_LEN {
        return None;
    }
    let encoded = text.strip_prefix(kind.prefix())?.strip_prefix(VERSION)?;
    let bytes = URL_SAFE_NO_PAD.decode(encoded).ok()?;
    if bytes.len() < 16 + 1 + TAG_LEN {
        return None;
    }
    let (payload, tag) = bytes.split_at(bytes.len() - TAG_LEN);
    let expected = key.tag(kind, payload);
    // Constant time: a caller learns nothing of the tag byte by byte.
    let differs = expected
        .iter()
        .zip(tag)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    if differs != 0 {
        return None;
    }
    let channel = i64::from_be_bytes(payload.get(..8)?.try_into().ok()?);
    let token = i64::from_be_bytes(payload.get(8..16)?.try_into().ok()?);
    let upstream = std::str::from_utf8(payload.get(16..)?).ok()?;
    wrappable(upstream).then(|| ObjectId {
        channel,
        token,
        upstream: upstream.to_owned(),
    })
}

/// The fuzz target's checks: decoding any text never panics, accepts only what some
/// [`encode`] makes (re-encoding gives the text back), and a text's every one-byte change is
/// refused.
#[doc(hidden)]
pub fn fuzz(data: &[u8]) {
    let key = IdKey::new([7; 32]);
    let text = String::from_utf8_lossy(data);
    for kind in Kind::ALL {
        if let Some(id) = decode(&key, kind, &text) {
            assert_eq!(encode(&key, kind, &id).as_deref(), Some(&*text));
        }
    }
    // Round trip of an id made from the data, and its tampered copies refused.
    if data.len() < 17 {
        return;
    }
    let channel = i64::from_le_bytes(data[..8].try_into().unwrap_or_default());
    let token = i64::from_le_bytes(data[8..16].try_into().unwrap_or_default());
    let upstream = String::from_utf8_lossy(&data[16..]).into_owned();
    let id = ObjectId {
        channel,
        token,
        upstream,
    };
    let kind = Kind::ALL[usize::from(data[0]) % Kind::ALL.len()];
    let Some(text) = encode(&key, kind, &id) else {
        assert!(!wrappable(&id.upstream));
        return;
    };
    assert!(text.len() <= MAX_ID_LEN);
    assert_eq!(decode(&key, kind, &text), Some(id));
    for other in Kind::ALL.into_iter().filter(|k| *k != kind) {
        let moved = format!("{}{}", other.prefix(), &text[kind.prefix().len()..]);
        assert_eq!(
            decode(&key, other, &moved),
            None,
            "a {kind:?} id read as {other:?}"
        );
    }
    assert_eq!(decode(&IdKey::new([8; 32]), kind, &text), None);
    let at = usize::from(data[1]) % text.len();
    let mut tampered = text.clone().into_bytes();
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    if let Ok(tampered) = String::from_utf8(tampered) {
        if tampered != text {
            assert_eq!(decode(&key, kind, &tampered), None, "{tampered}");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn id(upstream: &str) -> ObjectId {
        ObjectId {
            channel: 3,
            token: 42,
            upstream: upstream.to_owned(),
        }
    }

    #[test]
    fn an_id_keeps_its_prefix_and_reads_back() {
        let key = IdKey::new([1; 32]);
        for kind in Kind::ALL {
            let text = encode(&key, kind, &id("file-abc123")).unwrap();
            assert!(text.starts_with(kind.prefix()), "{text}");
            assert!(text.len() <= MAX_ID_LEN);
            assert_eq!(decode(&key, kind, &text), Some(id("file-abc123")));
        }
        let longest = "x".repeat(MAX_UPSTREAM_ID);
        let text = encode(&key, Kind::MessageBatch, &id(&longest)).unwrap();
        assert!(text.len() <= MAX_ID_LEN, "{} > {MAX_ID_LEN}", text.len());
        assert_eq!(decode(&key, Kind::MessageBatch, &text), Some(id(&longest)));
    }

    #[test]
    fn a_forged_tampered_or_foreign_id_is_no_id() {
        let key = IdKey::new([1; 32]);
        let text = encode(&key, Kind::File, &id("file-abc")).unwrap();
        // Another fleet's key, another kind, any changed character, a cut or a longer text.
        assert_eq!(decode(&IdKey::new([2; 32]), Kind::File, &text), None);
        assert_eq!(
            decode(&key, Kind::Batch, &text.replacen("file-", "batch_", 1)),
            None
        );
        for at in 0..text.len() {
            let mut bytes = text.clone().into_bytes();
            bytes[at] = if bytes[at] == b'Q' { b'R' } else { b'Q' };
            assert_eq!(
                decode(&key, Kind::File, std::str::from_utf8(&bytes).unwrap()),
                None
            );
        }
        assert_eq!(decode(&key, Kind::File, &text[..text.len() - 1]), None);
        assert_eq!(decode(&key, Kind::File, &format!("{text}A")), None);
        // An upstream's own id, made-up text, and a payload naming another channel with the
        // original tag.
        for raw in [
            "file-abc",
            "file-sy1",
            "file-sy1!!!!",
            "",
            &"A".repeat(10_000),
        ] {
            assert_eq!(decode(&key, Kind::File, raw), None, "{raw}");
        }
        let mut bytes = URL_SAFE_NO_PAD.decode(&text["file-sy1".len()..]).unwrap();
        bytes[7] ^= 1;
        let moved = format!("file-sy1{}", URL_SAFE_NO_PAD.encode(bytes));
        assert_eq!(decode(&key, Kind::File, &moved), None);
    }

    #[test]
    fn upstream_ids_that_cannot_be_wrapped_are_refused() {
        let key = IdKey::new([1; 32]);
        for bad in [
            "",
            "has space",
            "tab\t",
            "é",
            &"x".repeat(MAX_UPSTREAM_ID + 1),
        ] {
            assert_eq!(encode(&key, Kind::File, &id(bad)), None, "{bad:?}");
        }
    }

    #[test]
    fn a_derived_key_depends_on_the_secret_only() {
        let text = |key: &IdKey| encode(key, Kind::Batch, &id("batch_1")).unwrap();
        assert_eq!(
            text(&IdKey::derived("fleet")),
            text(&IdKey::derived("fleet"))
        );
        assert_ne!(
            text(&IdKey::derived("fleet")),
            text(&IdKey::derived("fleet2"))
        );
        assert_ne!(text(&IdKey::random()), text(&IdKey::random()));
        assert_eq!(format!("{:?}", IdKey::derived("fleet")), "IdKey(..)");
    }

    /// The fuzz target's checks over a few thousand inputs drawn from a fixed seed: made ids
    /// of every length, and texts that look like ids.
    #[test]
    fn the_fuzz_checks_hold_for_drawn_inputs() {
        let mut rng = switchyard_engine::SplitMix64::new(7);
        use switchyard_engine::RandomSource;
        for _ in 0..3_000 {
            let len = (rng.next_u64() % 220) as usize;
            let mut data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            if rng.next_u64().is_multiple_of(2) {
                // Printable upstream ids, which make ids.
                for b in data.iter_mut().skip(16) {
                    *b = b'!' + *b % 94;
                }
            }
            fuzz(&data);
        }
    }

    #[test]
    fn the_fuzz_checks_hold_for_some_inputs() {
        for data in [
            &b""[..],
            b"file-sy1AAAA",
            b"0123456789abcdefupstream-id",
            b"\x02\x05\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xffbatch_x",
        ] {
            fuzz(data);
        }
    }
}
