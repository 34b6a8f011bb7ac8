//! What a configuration file may hold at most, checked before it is deserialized: its text, what
//! it amounts to once its aliases are expanded, how deep it nests, the length of any one value
//! and the items of any one list or map. A YAML alias repeats what its anchor holds, so a small
//! file can stand for gigabytes (`[&s "<500 KB>", *s, *s, …]`); the check walks the expanded
//! document without building it (a value is borrowed from the text, never copied) and stops at
//! the first bound passed, naming the field path where it was passed.

use std::fmt;
use std::io::Read;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::error::{err, ConfigError};

/// Longest configuration file (bytes of text), as the admin API's request body limit.
pub const MAX_FILE_BYTES: usize = 1024 * 1024;
/// Most a file may amount to once its aliases are expanded: the bytes of every value's text,
/// plus [`VALUE_OVERHEAD`] bytes for every value, key and list or map.
pub const MAX_EXPANDED_BYTES: usize = 4 * 1024 * 1024;
/// What each value adds to the expanded size besides its text.
pub const VALUE_OVERHEAD: usize = 8;
/// Deepest nesting of lists and maps (the schema itself nests 6: `routes[].members[].capabilities`).
pub const MAX_DEPTH: usize = 32;
/// Longest single value (bytes).
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// Most items in one list or map.
pub const MAX_ITEMS: usize = 100_000;

fn mib(bytes: usize) -> String {
    format!("{} MiB", bytes / (1024 * 1024))
}

/// Reads a configuration file (or any reader) of at most [`MAX_FILE_BYTES`], never more of it.
pub fn read_bounded(reader: impl Read, what: &str) -> Result<String, ConfigError> {
    let mut bytes = Vec::new();
    reader
        .take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| err("", format!("cannot read {what}: {e}")))?;
    if bytes.len() > MAX_FILE_BYTES {
        return Err(too_long_file());
    }
    String::from_utf8(bytes).map_err(|_| err("", format!("{what} is not UTF-8 text")))
}

/// [`read_bounded`] on the file at `path`.
pub fn read_file(path: &std::path::Path) -> Result<String, ConfigError> {
    let what = path.display().to_string();
    let file =
        std::fs::File::open(path).map_err(|e| err("", format!("cannot read {what}: {e}")))?;
    read_bounded(file, &what)
}

fn too_long_file() -> ConfigError {
    err(
        "",
        format!(
            "the file is longer than {} ({MAX_FILE_BYTES} bytes)",
            mib(MAX_FILE_BYTES)
        ),
    )
}

/// Checks `text` against every bound above; the first one passed is the error. A YAML syntax
/// error is left for the parser, which names it better.
pub fn check(text: &str) -> Result<(), ConfigError> {
    if text.len() > MAX_FILE_BYTES {
        return Err(too_long_file());
    }
    let mut walk = Walk::default();
    let result = Node {
        walk: &mut walk,
        depth: 0,
    }
    .deserialize(yaml_serde::Deserializer::from_str(text));
    match (result, walk.refused) {
        (_, Some(refused)) => Err(refused),
        _ => Ok(()),
    }
}

/// Where the walk is in the document and what it has counted.
#[derive(Default)]
struct Walk {
    expanded: usize,
    path: Vec<Segment>,
    refused: Option<ConfigError>,
}

enum Segment {
    Key(String),
    Index(usize),
}

impl Walk {
    fn path(&self) -> String {
        let mut out = String::new();
        for segment in &self.path {
            match segment {
                Segment::Key(key) if out.is_empty() => out.push_str(key),
                Segment::Key(key) => {
                    out.push('.');
                    out.push_str(key);
                }
                Segment::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }

    /// Records the first bound passed; the error only stops the walk.
    fn refuse<E: de::Error>(&mut self, message: String) -> E {
        if self.refused.is_none() {
            self.refused = Some(err(self.path(), message));
        }
        E::custom("configuration bound passed")
    }

    fn count<E: de::Error>(&mut self, bytes: usize) -> Result<(), E> {
        if bytes > MAX_VALUE_BYTES {
            return Err(self.refuse(format!(
                "is {bytes} bytes long; a value may be at most {MAX_VALUE_BYTES} bytes"
            )));
        }
        self.expanded = self.expanded.saturating_add(bytes + VALUE_OVERHEAD);
        if self.expanded > MAX_EXPANDED_BYTES {
            self.path.clear();
            return Err(self.refuse(format!(
                "the file amounts to more than {} once its aliases are expanded; aliases \
                 (`*name`) repeat what their anchor holds, and a file may expand to at most \
                 {MAX_EXPANDED_BYTES} bytes",
                mib(MAX_EXPANDED_BYTES)
            )));
        }
        Ok(())
    }

    fn item<E: de::Error>(&mut self, items: usize) -> Result<(), E> {
        if items > MAX_ITEMS {
            return Err(self.refuse(format!(
                "holds more than {MAX_ITEMS} items; a list or map may hold at most {MAX_ITEMS}"
            )));
        }
        Ok(())
    }
}

/// One value of the document, at `depth` lists and maps down.
struct Node<'w> {
    walk: &'w mut Walk,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl Node<'_> {
    /// A list or map starts here: counted, and no deeper than [`MAX_DEPTH`].
    fn open<E: de::Error>(&mut self) -> Result<(), E> {
        if self.depth >= MAX_DEPTH {
            return Err(self.walk.refuse(format!(
                "nests deeper than {MAX_DEPTH} levels of lists and maps"
            )));
        }
        self.walk.count(0)
    }

    /// A value inside this list or map.
    fn nested(&mut self) -> Node<'_> {
        Node {
            walk: &mut *self.walk,
            depth: self.depth + 1,
        }
    }
}

macro_rules! scalar {
    ($($method:ident: $ty:ty),*) => {$(
        fn $method<E: de::Error>(self, _: $ty) -> Result<(), E> {
            self.walk.count(0)
        }
    )*};
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    scalar!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_i128: i128,
        visit_u128: u128, visit_f64: f64);

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.walk.count(0)
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.walk.count(0)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<(), E> {
        self.walk.count(value.len())
    }

    fn visit_bytes<E: de::Error>(self, value: &[u8]) -> Result<(), E> {
        self.walk.count(value.len())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        self.open()?;
        let mut index = 0;
        loop {
            self.walk.path.push(Segment::Index(index));
            let more = seq.next_element_seed(self.nested())?.is_some();
            self.walk.path.pop();
            if !more {
                return Ok(());
            }
            index += 1;
            self.walk.item(index)?;
        }
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        self.open()?;
        let mut items = 0;
        loop {
            let Some(key) = map.next_key_seed(Key(self.nested()))? else {
                return Ok(());
            };
            items += 1;
            self.walk.item(items)?;
            self.walk.path.push(Segment::Key(key));
            map.next_value_seed(self.nested())?;
            self.walk.path.pop();
        }
    }

    fn visit_enum<A: de::EnumAccess<'de>>(mut self, data: A) -> Result<(), A::Error> {
        // A tagged value (`!tag value`): its tag is a short name, its value a value.
        let (_, variant) = data.variant::<de::IgnoredAny>()?;
        de::VariantAccess::newtype_variant_seed(variant, self.nested())
    }
}

/// A map's key: counted like any value, and kept (cut short) for the field path.
struct Key<'w>(Node<'w>);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map key")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<String, E> {
        self.0.walk.count(value.len())?;
        Ok(value.chars().take(64).collect())
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<String, E> {
        self.0.walk.count(0)?;
        Ok(value.to_string())
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<String, E> {
        self.0.walk.count(0)?;
        Ok(value.to_string())
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<String, E> {
        self.0.walk.count(0)?;
        Ok(value.to_string())
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<String, E> {
        self.0.walk.count(0)?;
        Ok(value.to_string())
    }

    fn visit_unit<E: de::Error>(self) -> Result<String, E> {
        self.0.walk.count(0)?;
        Ok("null".to_owned())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<String, A::Error> {
        self.0.visit_seq(seq).map(|()| "{list}".to_owned())
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<String, A::Error> {
        self.0.visit_map(map).map(|()| "{map}".to_owned())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::parse_raw;

    /// A channel whose `retry_error_patterns` is `patterns` (flow YAML).
    fn channel_with_patterns(patterns: &str) -> String {
        format!("channels:\n- name: a\n  provider: mock\n  retry_error_patterns: {patterns}\n")
    }

    /// `[&s "<value>", *s, *s, …]`: `aliases` repetitions of a `value_bytes` value.
    pub(crate) fn alias_bomb(value_bytes: usize, aliases: usize) -> String {
        let mut list = format!("[&s \"{}\"", "x".repeat(value_bytes));
        for _ in 0..aliases {
            list.push_str(", *s");
        }
        list.push(']');
        channel_with_patterns(&list)
    }

    /// The bomb, sized so that the parser before the bound finishes (it expands to
    /// 200 MB of values short enough each): a file of 74 KB refused, naming its expanded size,
    /// with nothing built.
    #[test]
    fn an_alias_bomb_is_refused_by_its_expanded_size() {
        let text = alias_bomb(60 * 1024, 3_400);
        assert!(text.len() < MAX_FILE_BYTES);
        let started = std::time::Instant::now();
        let e = parse_raw(&text).unwrap_err();
        assert_eq!(e.path, "", "{e}");
        assert!(
            e.message.contains("once its aliases are expanded")
                && e.message.contains(&MAX_EXPANDED_BYTES.to_string()),
            "{e}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // The very shape, a 500 KB value repeated: refused on that value at once.
        let e = parse_raw(&alias_bomb(500 * 1024, 400)).unwrap_err();
        assert_eq!(e.path, "channels[0].retry_error_patterns[0]", "{e}");
        // Aliases within the bound are fine.
        let fine = parse_raw(&alias_bomb(1024, 100)).unwrap();
        assert_eq!(fine.channels[0].retry_error_patterns.len(), 101);
    }

    /// Many small values count too: each adds its overhead. (2 MB of text once expanded, but
    /// two million values.)
    #[test]
    fn many_small_values_count_their_overhead() {
        let text = format!(
            "a: &a [{}]\nb: [{}]\n",
            vec!["x"; 20_000].join(","),
            vec!["*a"; 100].join(",")
        );
        const { assert!(20_000 * 100 < MAX_EXPANDED_BYTES) };
        let e = check(&text).unwrap_err();
        assert!(e.message.contains("once its aliases are expanded"), "{e}");
    }

    #[test]
    fn a_file_longer_than_the_bound_is_refused_before_it_is_read_whole() {
        let text = channel_with_patterns(&format!("[\"{}\"]", "x".repeat(50 * 1024 * 1024)));
        let e = parse_raw(&text).unwrap_err();
        assert!(e.message.contains("longer than 1 MiB"), "{e}");
        let e = read_bounded(std::io::repeat(b'x'), "the stream").unwrap_err();
        assert!(e.message.contains("longer than 1 MiB"), "{e}");
        let exact = read_bounded(std::io::repeat(b'x').take(MAX_FILE_BYTES as u64), "f").unwrap();
        assert_eq!(exact.len(), MAX_FILE_BYTES);
    }

    #[test]
    fn a_value_longer_than_the_bound_is_refused_naming_its_field() {
        let at_bound = channel_with_patterns(&format!("[\"{}\"]", "x".repeat(MAX_VALUE_BYTES)));
        check(&at_bound).unwrap();
        let over = channel_with_patterns(&format!("[y, \"{}\"]", "x".repeat(MAX_VALUE_BYTES + 1)));
        let e = parse_raw(&over).unwrap_err();
        assert_eq!(e.path, "channels[0].retry_error_patterns[1]");
        assert!(e.message.contains("at most 65536 bytes"), "{e}");
    }

    /// The deep map: an unknown field the schema ignores, 10 000 levels deep.
    #[test]
    fn nesting_deeper_than_the_bound_is_refused_even_where_fields_are_ignored() {
        let deep = |levels: usize| {
            format!(
                "channels:\n- name: a\n  provider: mock\n  capabilities: {}1{}\n",
                "{a: ".repeat(levels),
                "}".repeat(levels)
            )
        };
        let e = parse_raw(&deep(10_000)).unwrap_err();
        assert!(e.path.starts_with("channels[0].capabilities.a.a"), "{e}");
        assert!(e.message.contains("deeper than 32 levels"), "{e}");
        // The root map, the `channels` list and its item are 3 levels: 29 more fit.
        check(&deep(MAX_DEPTH - 3)).unwrap();
        assert!(check(&deep(MAX_DEPTH - 2)).is_err());
    }

    #[test]
    fn a_list_of_more_items_than_the_bound_is_refused() {
        let list = |n: usize| channel_with_patterns(&format!("[{}]", vec!["x"; n].join(",")));
        check(&list(MAX_ITEMS)).unwrap();
        let e = check(&list(MAX_ITEMS + 1)).unwrap_err();
        assert_eq!(e.path, "channels[0].retry_error_patterns");
        assert!(e.message.contains("at most 100000"), "{e}");
    }

    #[test]
    fn syntax_errors_are_left_to_the_parser() {
        let e = parse_raw("channels: [\n").unwrap_err();
        assert!(!e.message.contains("bound"), "{e}");
    }
}
