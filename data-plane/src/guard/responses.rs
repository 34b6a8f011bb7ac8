//! A Responses API stream's closing events, which repeat the answer's text whole: each text
//! part's `response.output_text.done` (`text`), `response.content_part.done` (`part.text`), its
//! item's `response.output_item.done` (`item.content[j].text`) and the stream's last event,
//! `response.completed` (or `response.incomplete`, `response.failed`:
//! `response.output[i].content[j].text`). A guarded stream writes into each the text it let the
//! client have for that part (checked, redacted, restored), so the closing events never undo
//! what the deltas did. Each text is found with its part's place, `(output_index,
//! content_index)`.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::value::RawValue;

use crate::guard::text::{string_piece, Piece};

/// A text part's place in the answer: its output item's index and its content index.
pub type Place = (u64, u64);

/// Which closing event an event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closing {
    /// `response.output_text.done`: one part's text is whole.
    TextDone,
    /// `response.content_part.done`.
    PartDone,
    /// `response.output_item.done`: every part of one item.
    ItemDone,
    /// `response.completed`, `response.incomplete` or `response.failed`: every part.
    Finished,
}

impl Closing {
    /// The closing event an event of this name is (`None`: another event).
    pub fn of(name: &str) -> Option<Closing> {
        match name {
            "response.output_text.done" => Some(Closing::TextDone),
            "response.content_part.done" => Some(Closing::PartDone),
            "response.output_item.done" => Some(Closing::ItemDone),
            "response.completed" | "response.incomplete" | "response.failed" => {
                Some(Closing::Finished)
            }
            _ => None,
        }
    }
}

type Object<'a> = BTreeMap<Cow<'a, str>, &'a RawValue>;

fn object(raw: &RawValue) -> Option<Object<'_>> {
    serde_json::from_str(raw.get()).ok()
}

fn index(object: &Object<'_>, key: &str) -> Option<u64> {
    object
        .get(key)
        .and_then(|v| serde_json::from_str::<u64>(v.get()).ok())
}

/// The texts of one closing event's `data`, each with its part's place (none when the data is
/// not JSON or holds no text where its kind puts it).
pub fn closing_texts(kind: Closing, data: &str) -> Vec<(Place, Piece)> {
    let body = data.as_bytes();
    let mut out = Vec::new();
    let Some(root) = serde_json::from_str::<&RawValue>(data)
        .ok()
        .and_then(object)
    else {
        return out;
    };
    let output_index = index(&root, "output_index");
    match kind {
        Closing::TextDone | Closing::PartDone => {
            let (Some(item), Some(content)) = (output_index, index(&root, "content_index")) else {
                return out;
            };
            let holder = match kind {
                Closing::TextDone => Some(root),
                _ => root.get("part").copied().and_then(object),
            };
            if let Some(piece) = holder
                .as_ref()
                .and_then(|h| h.get("text"))
                .and_then(|t| string_piece(body, t))
            {
                out.push(((item, content), piece));
            }
        }
        Closing::ItemDone => {
            if let (Some(item), Some(raw)) = (output_index, root.get("item")) {
                item_texts(body, item, raw, &mut out);
            }
        }
        Closing::Finished => {
            let output = root
                .get("response")
                .copied()
                .and_then(object)
                .and_then(|r| r.get("output").copied())
                .and_then(|o| serde_json::from_str::<Vec<&RawValue>>(o.get()).ok());
            for (i, raw) in output.unwrap_or_default().into_iter().enumerate() {
                item_texts(body, i as u64, raw, &mut out);
            }
        }
    }
    out
}

/// The texts of one output item's content parts, by their content index.
fn item_texts(body: &[u8], item: u64, raw: &RawValue, out: &mut Vec<(Place, Piece)>) {
    let Some(content) = object(raw)
        .and_then(|o| o.get("content").copied())
        .and_then(|c| serde_json::from_str::<Vec<&RawValue>>(c.get()).ok())
    else {
        return;
    };
    for (j, part) in content.into_iter().enumerate() {
        if let Some(piece) = object(part)
            .and_then(|p| p.get("text").copied())
            .and_then(|t| string_piece(body, t))
        {
            out.push(((item, j as u64), piece));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn places(kind: Closing, data: &str) -> Vec<(Place, String)> {
        closing_texts(kind, data)
            .into_iter()
            .map(|(place, piece)| (place, piece.text))
            .collect()
    }

    #[test]
    fn each_closing_event_names_its_texts_with_their_places() {
        let done =
            r#"{"type":"response.output_text.done","output_index":1,"content_index":0,"text":"t"}"#;
        assert_eq!(places(Closing::TextDone, done), [((1, 0), "t".into())]);
        let part =
            r#"{"output_index":0,"content_index":2,"part":{"type":"output_text","text":"p"}}"#;
        assert_eq!(places(Closing::PartDone, part), [((0, 2), "p".into())]);
        let item = r#"{"output_index":3,"item":{"content":[{"type":"refusal","refusal":"r"},{"type":"output_text","text":"i"}]}}"#;
        assert_eq!(places(Closing::ItemDone, item), [((3, 1), "i".into())]);
        let completed = r#"{"response":{"output":[{"type":"reasoning","summary":[]},{"type":"message","content":[{"type":"output_text","text":"a"},{"type":"output_text","text":"b"}]}]}}"#;
        assert_eq!(
            places(Closing::Finished, completed),
            [((1, 0), "a".into()), ((1, 1), "b".into())]
        );
        assert!(places(Closing::Finished, "not json").is_empty());
        assert_eq!(Closing::of("response.incomplete"), Some(Closing::Finished));
        assert_eq!(Closing::of("response.output_text.delta"), None);
    }
}
