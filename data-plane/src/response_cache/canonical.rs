//! A request body as the cache key reads it, in one pass over its bytes and without building a
//! JSON value: every object's fields sorted by name (the last of a repeated name kept), the
//! top-level fields that only shape the transport or name the caller left out, and every
//! scalar written as `serde_json` writes the value it parses (so the bytes are exactly those of
//! the body parsed into a `serde_json::Value` and written back with its keys sorted).
//!
//! The few top-level fields the cache judges a request by (its temperature, seed, whether a
//! Responses request is stateless, a stream's usage option) are kept aside in the same form.

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// Top-level body fields left out of the key.
pub const TRANSPORT_ONLY: [&str; 4] = ["stream", "stream_options", "user", "metadata"];

/// Top-level fields kept aside for the cache's judgement, in this order.
pub const FACTS: [&str; 8] = [
    "temperature",
    "seed",
    "generationConfig",
    "store",
    "background",
    "previous_response_id",
    "conversation",
    "stream_options",
];

/// A body read for the cache: a JSON object's normalised bytes and the fields it is judged by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canonical {
    normalised: Vec<u8>,
    facts: [Option<Vec<u8>>; FACTS.len()],
}

impl Canonical {
    /// Reads a body; `None` unless it is one JSON object (and nothing after it but whitespace).
    pub fn read(body: &[u8]) -> Option<Canonical> {
        let mut de = serde_json::Deserializer::from_slice(body);
        let mut writer = Writer::default();
        let facts = de.deserialize_any(Top(&mut writer)).ok()?;
        de.end().ok()?;
        Some(Canonical {
            normalised: writer.out,
            facts,
        })
    }

    /// The bytes the key hashes: keys sorted at every depth, the transport-only fields out.
    pub fn normalised(&self) -> &[u8] {
        &self.normalised
    }

    /// A top-level field the cache judges by, in canonical form; `None` when absent (or not
    /// one of those fields).
    pub fn field(&self, name: &str) -> Option<&[u8]> {
        let at = FACTS.iter().position(|f| *f == name)?;
        self.facts.get(at)?.as_deref()
    }

    /// A top-level field the cache judges by, parsed (these are small).
    pub fn value(&self, name: &str) -> Option<Value> {
        serde_json::from_slice(self.field(name)?).ok()
    }
}

/// An object's field name: borrowed from the body unless it had escapes.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }
}

/// One field of an object being read: its name and where its `"name":value` bytes are.
struct Field<'de> {
    key: Key<'de>,
    start: usize,
    value_start: usize,
    end: usize,
}

/// The output, a scratch buffer for reordering fields and the fields of the open objects (each
/// object's above its parent's).
#[derive(Default)]
struct Writer<'de> {
    out: Vec<u8>,
    scratch: Vec<u8>,
    fields: Vec<Field<'de>>,
}

/// An open object's fields read: the first of them in `fields`, where its bytes begin (after
/// `{`), and whether they came sorted, each name once (then its bytes are in order as written).
struct Opened {
    base: usize,
    body_start: usize,
    sorted: bool,
}

impl<'de> Writer<'de> {
    fn scalar<T: serde::Serialize + ?Sized>(&mut self, value: &T) {
        // Writing into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut self.out, value);
    }

    /// A string the body held without escapes, written as `serde_json` writes it: as it came
    /// (a JSON string without escapes holds no quote, backslash or control character, the only
    /// characters written escaped).
    fn unescaped(&mut self, text: &str) {
        self.out.push(b'"');
        self.out.extend_from_slice(text.as_bytes());
        self.out.push(b'"');
    }

    /// Reads an object's fields, each written as `"name":value` (joined by commas as they
    /// come).
    fn read_fields<A: MapAccess<'de>>(&mut self, mut map: A) -> Result<Opened, A::Error> {
        self.out.push(b'{');
        let opened = Opened {
            base: self.fields.len(),
            body_start: self.out.len(),
            sorted: true,
        };
        let mut sorted = true;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            if let Some(last) = self.fields[opened.base..].last() {
                sorted &= last.key.as_str() < key.as_str();
                self.out.push(b',');
            }
            let start = self.out.len();
            match &key {
                Key::Borrowed(name) => self.unescaped(name),
                Key::Owned(name) => self.scalar(name.as_str()),
            }
            self.out.push(b':');
            let value_start = self.out.len();
            map.next_value_seed(ValueSeed(self))?;
            let end = self.out.len();
            self.fields.push(Field {
                key,
                start,
                value_start,
                end,
            });
        }
        Ok(Opened { sorted, ..opened })
    }

    /// Sorts an open object's fields by name, the last of a repeated name kept.
    fn sort_fields(&mut self, base: usize) {
        self.fields[base..].sort_by(|a, b| a.key.as_str().cmp(b.key.as_str()));
        let mut kept = base;
        for read in base..self.fields.len() {
            if kept > base && self.fields[kept - 1].key.as_str() == self.fields[read].key.as_str() {
                self.fields.swap(kept - 1, read);
            } else {
                self.fields.swap(kept, read);
                kept += 1;
            }
        }
        self.fields.truncate(kept);
    }

    /// Closes an open object: its fields in name order, those `skip` names left out.
    fn close(&mut self, opened: &Opened, skip: &dyn Fn(&str) -> bool) {
        let reorder = !opened.sorted
            || self.fields[opened.base..]
                .iter()
                .any(|f| skip(f.key.as_str()));
        if reorder {
            // (Sorting sorted fields again, as the top level's are, leaves them as they are.)
            if !opened.sorted {
                self.sort_fields(opened.base);
            }
            self.scratch.clear();
            self.scratch
                .extend_from_slice(&self.out[opened.body_start..]);
            self.out.truncate(opened.body_start);
            let mut first = true;
            for field in &self.fields[opened.base..] {
                if skip(field.key.as_str()) {
                    continue;
                }
                if !first {
                    self.out.push(b',');
                }
                first = false;
                let (from, to) = (
                    field.start - opened.body_start,
                    field.end - opened.body_start,
                );
                self.out.extend_from_slice(&self.scratch[from..to]);
            }
        }
        self.out.push(b'}');
        self.fields.truncate(opened.base);
    }
}

struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Key<'de>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a field name")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
        Ok(Key::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
        Ok(Key::Owned(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
        Ok(Key::Owned(v))
    }
}

/// Any value, written in canonical form.
struct ValueSeed<'w, 'de>(&'w mut Writer<'de>);

impl<'de> DeserializeSeed<'de> for ValueSeed<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.0.scalar(&v);
        Ok(())
    }

    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.0.scalar(&v);
        Ok(())
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.0.scalar(&v);
        Ok(())
    }

    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        // As a parsed value holds it: a number, or `null` for what no JSON number is.
        self.0.scalar(&Value::from(v));
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.0.scalar(v);
        Ok(())
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<(), E> {
        self.0.unescaped(v);
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.out.extend_from_slice(b"null");
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let w = self.0;
        w.out.push(b'[');
        let mut first = true;
        loop {
            let at = w.out.len();
            if !first {
                w.out.push(b',');
            }
            if seq.next_element_seed(ValueSeed(w))?.is_none() {
                w.out.truncate(at);
                break;
            }
            first = false;
        }
        w.out.push(b']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        let w = self.0;
        let opened = w.read_fields(map)?;
        w.close(&opened, &|_| false);
        Ok(())
    }
}

/// The body itself: an object, its judged fields kept aside, its transport-only ones left out.
struct Top<'w, 'de>(&'w mut Writer<'de>);

impl<'de> Visitor<'de> for Top<'_, 'de> {
    type Value = [Option<Vec<u8>>; FACTS.len()];

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let w = self.0;
        let opened = w.read_fields(map)?;
        if !opened.sorted {
            w.sort_fields(opened.base);
        }
        let mut facts: Self::Value = Default::default();
        for field in &w.fields[opened.base..] {
            if let Some(at) = FACTS.iter().position(|f| *f == field.key.as_str()) {
                facts[at] = Some(w.out[field.value_start..field.end].to_vec());
            }
        }
        w.close(&opened, &|name| TRANSPORT_ONLY.contains(&name));
        Ok(facts)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::response_cache::key::normalised;

    /// The body parsed into a value and written back sorted: the form the key always had.
    fn through_a_value(body: &str) -> Vec<u8> {
        normalised(&serde_json::from_str::<Value>(body).unwrap())
    }

    #[test]
    fn the_bytes_are_those_of_the_body_parsed_and_written_back_sorted() {
        let bodies = [
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0}"#,
            r#"{"z":1,"a":{"y":[1,2,{"b":null,"a":true}],"x":false},"m":-3}"#,
            r#"{"n":[1.0,1e2,-0.0,0.1,1.5e300,-12,18446744073709551615,-9223372036854775808]}"#,
            r#"{"big":123456789012345678901234567890,"tiny":1e-320,"e":2E+3}"#,
            r#"{"s":"caf\u00e9 \/ \"q\" \\ \n \t \u0001 \ud83d\ude00 é","k\u0065y":"v"}"#,
            r#"{"dup":1,"a":0,"dup":{"x":2},"dup":[3]}"#,
            r#"{"o":{"dup":1,"dup":2,"a":{"c":1,"b":2,"c":3}}}"#,
            r#"{"stream":true,"stream_options":{"include_usage":true},"user":"u","metadata":{}}"#,
            r#"{"nested":{"stream":true,"user":"kept below the top"}}"#,
            r#" { "ws" : [ ] , "e" : { } , "a" : "" } "#,
            r#"{}"#,
            r#"{"é":1,"z":2,"\u0000":3,"Z":4,"":5}"#,
            "{\"raw\":\"a/b \u{7f} é 😀 <>&' ~\",\"k\u{7f}é\":[\"\",\" \"]}",
        ];
        for body in bodies {
            let read = Canonical::read(body.as_bytes()).unwrap();
            assert_eq!(
                String::from_utf8_lossy(read.normalised()),
                String::from_utf8_lossy(&through_a_value(body)),
                "{body}"
            );
        }
    }

    #[test]
    fn only_one_json_object_is_read() {
        for body in [
            "[1]",
            "1",
            "\"s\"",
            "null",
            "true",
            "",
            "{",
            "{\"a\":1} {}",
            "{\"a\":}",
            "{\"a\":1}x",
        ] {
            assert_eq!(Canonical::read(body.as_bytes()), None, "{body}");
        }
        assert!(Canonical::read(b"{\"a\":1}\n").is_some());
    }

    #[test]
    fn the_judged_fields_are_kept_aside_in_canonical_form() {
        let read = Canonical::read(
            br#"{"temperature":0.0,"seed":null,"generationConfig":{"temperature":0,"seed":1},
                "store":false,"stream_options":{"include_usage":true},"other":1,"temperature":0}"#,
        )
        .unwrap();
        assert_eq!(read.field("temperature"), Some(&b"0"[..]), "the last one");
        assert_eq!(read.field("seed"), Some(&b"null"[..]));
        assert_eq!(
            read.field("generationConfig"),
            Some(&br#"{"seed":1,"temperature":0}"#[..])
        );
        assert_eq!(read.field("store"), Some(&b"false"[..]));
        assert_eq!(read.field("background"), None);
        assert_eq!(read.field("other"), None, "not a judged field");
        assert_eq!(
            read.value("stream_options"),
            Some(serde_json::json!({"include_usage": true}))
        );
    }
}
