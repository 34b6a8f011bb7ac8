//! Helpers shared by the fuzz targets in `fuzz_targets/`.
//!
//! Every target takes a real-looking input as it is (a JSON body, an SSE stream, a YAML file, a
//! protobuf message), so the seed corpora in `fuzz/corpus/<target>/` are plain examples. What a
//! target varies besides the input (chunk boundaries, protocols, replacement models) is derived
//! from the input's bytes, so a crash input alone reproduces the crash.

use switchyard_provider::Protocol;

pub mod framing_reference;

/// FNV-1a of the input: a deterministic seed for the choices a target derives from its input.
pub fn seed(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A small deterministic generator (SplitMix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `data` cut into chunks of pseudo-random lengths (1 to `max` bytes) drawn from `rng`.
pub fn chunks<'a>(data: &'a [u8], rng: &mut Rng, max: usize) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let n = (1 + rng.below(max)).min(rest.len());
        let (head, tail) = rest.split_at(n);
        out.push(head);
        rest = tail;
    }
    out
}

/// `data` one byte at a time (the worst split a network can produce).
pub fn bytewise(data: &[u8]) -> Vec<&[u8]> {
    data.chunks(1).collect()
}

/// Every (upstream, client) pair of protocols.
pub fn pairs() -> impl Iterator<Item = (Protocol, Protocol)> {
    Protocol::ALL
        .into_iter()
        .flat_map(|u| Protocol::ALL.into_iter().map(move |c| (u, c)))
}

/// Replacement model names a target splices in: plain, with a path, non-ASCII, and one that
/// JSON must escape.
pub const UPSTREAM_MODELS: [&str; 5] = [
    "gpt-4o-mini",
    "models/gemini-2.0-flash",
    "claude-3-5-haiku-20241022",
    "模型-四",
    "quote\"back\\slash/é",
];

/// The rule the data plane applies to a model name before routing (non-empty after trimming,
/// at most 256 bytes, no control characters).
pub fn acceptable_model(model: &str) -> bool {
    !model.trim().is_empty() && model.len() <= 256 && !model.chars().any(char::is_control)
}

/// Where `new` is `old` with one span replaced by `replacement`: the offset of the replacement,
/// if every byte before and after it is `old`'s own.
pub fn splice_offset(old: &[u8], new: &[u8], replacement: &[u8]) -> Option<usize> {
    let kept = new.len().checked_sub(replacement.len())?;
    if kept > old.len() {
        return None;
    }
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let suffix = old
        .iter()
        .rev()
        .zip(new.iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    // The replacement starts at p: new[..p] == old[..p], new[p + r..] == old[old.len() - (kept - p)..].
    let lowest = kept.saturating_sub(suffix);
    (lowest..=prefix.min(kept)).find(|&p| &new[p..p + replacement.len()] == replacement)
}

/// A reference wildcard matcher: `*` any run of characters (also none), `?` exactly one,
/// everything else itself. Plain dynamic programming over characters, no cleverness.
pub fn reference_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // m[j] = pattern[..i] matches text[..j]
    let mut m = vec![false; t.len() + 1];
    m[0] = true;
    for &pc in &p {
        let mut next = vec![false; t.len() + 1];
        match pc {
            '*' => {
                let mut any = false;
                for j in 0..=t.len() {
                    any |= m[j];
                    next[j] = any;
                }
            }
            _ => {
                for j in 1..=t.len() {
                    next[j] = m[j - 1] && (pc == '?' || pc == t[j - 1]);
                }
            }
        }
        m = next;
    }
    m[t.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_offsets() {
        assert_eq!(splice_offset(b"a\"x\"b", b"a\"yy\"b", b"\"yy\""), Some(1));
        assert_eq!(splice_offset(b"abc", b"abc", b""), Some(0));
        assert_eq!(splice_offset(b"abc", b"zbc", b"q"), None);
    }

    #[test]
    fn reference_matcher() {
        assert!(reference_match("a*b?", "axxbc"));
        assert!(reference_match("*", ""));
        assert!(!reference_match("?", ""));
        assert!(reference_match("模?", "模型"));
    }
}
