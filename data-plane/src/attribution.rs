//! A request's attribution for the request log: its tags and its end user, read once when the
//! request is received, checked against fixed bounds (a request over them is refused with a
//! precise message in the client's protocol).
//!
//! Tags come from the `x-switchyard-tags` header (comma-separated) when the request carries it,
//! else from the body's `metadata.tags` (a comma-separated string, as OpenAI's string-valued
//! `metadata` holds it, or a list of strings): the header wins, so infrastructure in front of an
//! application can tag its traffic without touching bodies. Surrounding spaces and empty items
//! are ignored and repeated tags are kept once. The end user is OpenAI's `user` field, else
//! Anthropic's `metadata.user_id`.

use switchyard_proto::usage::{tag_byte, MAX_END_USER_CHARS, MAX_TAGS, MAX_TAG_LEN};

/// Header naming a request's tags.
pub const TAGS_HEADER: &str = "x-switchyard-tags";

/// Checks one tag; the message names `source` and the rule it breaks.
fn check_tag(source: &str, tag: &str) -> Result<(), String> {
    if tag.len() > MAX_TAG_LEN {
        return Err(format!(
            "{source}: tag `{}…` is longer than {MAX_TAG_LEN} characters",
            &tag[..tag.char_indices().nth(16).map_or(tag.len(), |(i, _)| i)]
        ));
    }
    if let Some(bad) = tag.chars().find(|c| !c.is_ascii() || !tag_byte(*c as u8)) {
        return Err(format!(
            "{source}: tag `{}` has the character {bad:?}; tags may use ASCII letters, digits \
             and _ - . : / = only",
            tag.chars().take(MAX_TAG_LEN).collect::<String>()
        ));
    }
    Ok(())
}

/// The tags of `items` (already split), trimmed, empties left out, each kept once, checked.
pub fn tags_of<'a>(
    source: &str,
    items: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<String>, String> {
    let mut tags: Vec<String> = Vec::new();
    for item in items.into_iter().map(str::trim).filter(|t| !t.is_empty()) {
        check_tag(source, item)?;
        if tags.iter().any(|t| t == item) {
            continue;
        }
        if tags.len() == MAX_TAGS {
            return Err(format!("{source}: more than {MAX_TAGS} tags"));
        }
        tags.push(item.to_owned());
    }
    Ok(tags)
}

/// The tags of the `x-switchyard-tags` header's value.
pub fn header_tags(value: &[u8]) -> Result<Vec<String>, String> {
    let text = std::str::from_utf8(value)
        .map_err(|_| format!("{TAGS_HEADER}: the header is not valid UTF-8"))?;
    tags_of(TAGS_HEADER, text.split(','))
}

/// The tags of the body's `metadata.tags` value (raw JSON): a comma-separated string or a list
/// of strings; `null` is none.
pub fn metadata_tags(raw: &str) -> Result<Vec<String>, String> {
    const SOURCE: &str = "metadata.tags";
    if raw == "null" {
        return Ok(Vec::new());
    }
    if let Ok(text) = serde_json::from_str::<String>(raw) {
        return tags_of(SOURCE, text.split(','));
    }
    match serde_json::from_str::<Vec<String>>(raw) {
        Ok(list) => tags_of(SOURCE, list.iter().map(String::as_str)),
        Err(_) => Err(format!(
            "{SOURCE} must be a comma-separated string or a list of strings"
        )),
    }
}

/// An end user as the request names it (`field`: where), checked: `None` when empty.
pub fn end_user(field: &str, value: String) -> Result<Option<String>, String> {
    if value.chars().count() > MAX_END_USER_CHARS {
        return Err(format!(
            "{field} is longer than {MAX_END_USER_CHARS} characters"
        ));
    }
    if value.contains('\0') {
        return Err(format!("{field} contains a NUL character"));
    }
    Ok((!value.is_empty()).then_some(value))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn header_tags_are_trimmed_deduplicated_and_empties_ignored() {
        assert_eq!(
            header_tags(b" team:search , env=prod,,team:search,a/b.c_d-e ").unwrap(),
            ["team:search", "env=prod", "a/b.c_d-e"]
        );
        assert!(header_tags(b"").unwrap().is_empty());
    }

    #[test]
    fn sixteen_tags_pass_and_seventeen_are_refused() {
        let list: Vec<String> = (0..17).map(|i| format!("t{i}")).collect();
        assert_eq!(
            tags_of("h", list[..16].iter().map(String::as_str))
                .unwrap()
                .len(),
            16
        );
        let over = tags_of("h", list.iter().map(String::as_str)).unwrap_err();
        assert_eq!(over, "h: more than 16 tags");
    }

    #[test]
    fn a_tag_of_64_characters_passes_and_65_is_refused() {
        assert!(tags_of("h", [&*"a".repeat(64)]).is_ok());
        let over = tags_of("h", [&*"a".repeat(65)]).unwrap_err();
        assert!(over.contains("longer than 64"), "{over}");
    }

    #[test]
    fn a_tag_outside_the_charset_is_refused_naming_the_character() {
        for bad in ["a b", "é", "a,b;", "x\"y", "<t>"] {
            let item = bad.replace(',', "");
            let e = tags_of("h", [item.as_str()]).unwrap_err();
            assert!(e.contains("ASCII letters, digits"), "{bad}: {e}");
        }
        assert!(header_tags(&[0xff, 0xfe]).is_err());
    }

    #[test]
    fn metadata_tags_take_a_string_or_a_list() {
        assert_eq!(metadata_tags("\"a, b\"").unwrap(), ["a", "b"]);
        assert_eq!(metadata_tags("[\"a\",\"b\",\"a\"]").unwrap(), ["a", "b"]);
        assert!(metadata_tags("null").unwrap().is_empty());
        assert!(metadata_tags("3").unwrap_err().contains("metadata.tags"));
    }

    #[test]
    fn an_end_user_is_bounded() {
        assert_eq!(
            end_user("user", "u1".into()).unwrap().as_deref(),
            Some("u1")
        );
        assert_eq!(end_user("user", String::new()).unwrap(), None);
        assert!(end_user("user", "x".repeat(256)).is_ok());
        assert!(end_user("user", "x".repeat(257))
            .unwrap_err()
            .contains("longer than 256"));
        assert!(end_user("user", "a\0b".into()).is_err());
    }
}
