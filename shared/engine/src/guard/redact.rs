//! Redaction and its undoing. A match is replaced by a placeholder of its kind and a number,
//! `[EMAIL_1]`, `[CARD_2]`; one request's [`RestoreMap`] numbers every text of the request, so
//! the same value gets the same placeholder wherever it appears and restoring is exact. A number
//! whose placeholder the text already holds is skipped; a placeholder of the map that an answer
//! holds is restored wherever it stands (the map is the request's own, so the text restored is
//! the client's own).

use std::collections::HashMap;

use super::detect::floor_char;
use super::finding::{non_overlapping, Finding};

/// The placeholders one request's redactions made, and what each replaced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreMap {
    /// placeholder -> original text.
    originals: HashMap<String, String>,
    /// (kind, original text) -> placeholder.
    placeholders: HashMap<(String, String), String>,
    /// kind -> the last number given.
    counters: HashMap<String, u32>,
    /// Length of the longest placeholder (bytes).
    longest: usize,
}

impl RestoreMap {
    pub fn new() -> RestoreMap {
        RestoreMap::default()
    }

    pub fn is_empty(&self) -> bool {
        self.originals.is_empty()
    }

    /// How many distinct values were replaced.
    pub fn len(&self) -> usize {
        self.originals.len()
    }

    /// Length of the longest placeholder given (bytes; 0 when none).
    pub fn longest_placeholder(&self) -> usize {
        self.longest
    }

    /// `text` with every finding replaced by its placeholder (overlapping findings: see
    /// [`non_overlapping`]); findings out of range or off character boundaries are skipped.
    pub fn redact(&mut self, text: &str, findings: &[Finding]) -> String {
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for f in non_overlapping(findings) {
            let r = &f.range;
            // Sorted and apart: each starts at or after the previous one's end (`at`).
            if text.get(r.clone()).is_none_or(str::is_empty) {
                continue;
            }
            out.push_str(&text[at..r.start]);
            out.push_str(&self.placeholder(&f.kind, &text[r.clone()], text));
            at = r.end;
        }
        out.push_str(&text[at..]);
        out
    }

    /// The placeholder for `original` of `kind` (the same one every time in this map); a new
    /// one skips the numbers whose placeholder the text itself already holds, so restoring the
    /// text gives it back exactly.
    fn placeholder(&mut self, kind: &str, original: &str, text: &str) -> String {
        let key = (kind.to_owned(), original.to_owned());
        if let Some(p) = self.placeholders.get(&key) {
            return p.clone();
        }
        let n = self.counters.entry(kind.to_owned()).or_insert(0);
        let placeholder = loop {
            *n += 1;
            let candidate = format!("[{kind}_{n}]");
            if !text.contains(&candidate) {
                break candidate;
            }
        };
        self.longest = self.longest.max(placeholder.len());
        self.originals
            .insert(placeholder.clone(), original.to_owned());
        self.placeholders.insert(key, placeholder.clone());
        placeholder
    }

    /// `text` with every placeholder of this map replaced by the original it stands for.
    pub fn restore(&self, text: &str) -> String {
        if self.originals.is_empty() {
            return text.to_owned();
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        let mut search = 0;
        while let Some(open) = text[search..].find('[').map(|i| search + i) {
            let window = &text[open..floor_char(text, open + self.longest)];
            let original = window
                .find(']')
                .and_then(|close| self.originals.get(&window[..=close]));
            match original {
                Some(original) => {
                    out.push_str(&text[at..open]);
                    out.push_str(original);
                    at = open + window.find(']').map_or(0, |c| c + 1);
                    search = at;
                }
                None => search = open + 1,
            }
        }
        out.push_str(&text[at..]);
        out
    }

    /// The part of a stream's `pending` text that can go out, restored (taken out of `pending`):
    /// all of it but a `[` that may open a placeholder not yet whole, and what follows it. The
    /// step [`RestoreWindow::push`] takes, for a stream that keeps its pending text itself (one
    /// whose map is shared rather than borrowed).
    pub fn release(&self, pending: &mut String) -> String {
        let from = pending.len().saturating_sub(self.longest.saturating_sub(1));
        // A `[` in the last (longest - 1) bytes with no `]` after it may open a placeholder.
        let held = pending.char_indices().rev().take_while(|(i, _)| *i >= from);
        let cut = held
            .filter(|(_, c)| *c == '[')
            .map(|(i, _)| i)
            .filter(|i| !pending[*i..].contains(']'))
            .last()
            .unwrap_or(pending.len());
        let ready: String = pending.drain(..cut).collect();
        self.restore(&ready)
    }

    /// A window restoring a stream of text deltas (a placeholder may be split across them).
    pub fn stream(&self) -> RestoreWindow<'_> {
        RestoreWindow {
            map: self,
            pending: String::new(),
        }
    }
}

/// [`RestoreMap::redact`] with a fresh map: the redacted text and the map to restore it.
pub fn redact(text: &str, findings: &[Finding]) -> (String, RestoreMap) {
    let mut map = RestoreMap::new();
    let redacted = map.redact(text, findings);
    (redacted, map)
}

/// [`RestoreMap::restore`].
pub fn restore(text: &str, map: &RestoreMap) -> String {
    map.restore(text)
}

/// Restores a stream: holds back text from a `[` that may begin a placeholder not yet whole,
/// releases the rest restored.
#[derive(Debug)]
pub struct RestoreWindow<'m> {
    map: &'m RestoreMap,
    pending: String,
}

impl RestoreWindow<'_> {
    /// Adds a delta; returns the text that can be released, restored.
    pub fn push(&mut self, delta: &str) -> String {
        self.pending.push_str(delta);
        self.map.release(&mut self.pending)
    }

    /// The rest of the stream, restored.
    pub fn finish(self) -> String {
        self.map.restore(&self.pending)
    }
}
