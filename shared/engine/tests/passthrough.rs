//! The pass-through rules at their limits: a pattern or a path exactly at its size limit is
//! accepted and one beyond is refused, and each kind of unsafe path is described in words of its
//! own.

use switchyard_engine::passthrough::{
    check_path, validate_pattern, BadPath, MAX_PATH_BYTES, MAX_PATTERN_CHARS,
};

/// A pattern of `len` characters: `/` and then `fill` repeated.
fn pattern_of(len: usize, fill: char) -> String {
    let mut p = String::from("/");
    p.extend(std::iter::repeat_n(fill, len - 1));
    p
}

#[test]
fn a_pattern_may_be_as_long_as_the_limit_in_characters_not_bytes() {
    let check = |pattern: &str, accepted: bool| {
        let len = pattern.chars().count();
        assert_eq!(
            validate_pattern(pattern).is_ok(),
            accepted,
            "{len} characters"
        );
    };
    check(&pattern_of(MAX_PATTERN_CHARS, 'a'), true);
    check(&pattern_of(MAX_PATTERN_CHARS + 1, 'a'), false);
    // Two bytes a character: the limit counts characters.
    check(&pattern_of(MAX_PATTERN_CHARS, 'é'), true);
    check(&pattern_of(MAX_PATTERN_CHARS + 1, 'é'), false);
}

#[test]
fn a_path_may_be_as_long_as_the_limit_in_bytes() {
    let check = |path: &str, expected: Result<(), BadPath>| {
        assert_eq!(check_path(path), expected, "{} bytes", path.len());
    };
    let path_of = |len: usize| format!("/{}", "a".repeat(len - 1));
    check(&path_of(MAX_PATH_BYTES), Ok(()));
    check(&path_of(MAX_PATH_BYTES + 1), Err(BadPath::TooLong));
    // Bytes, not characters: `é` is two bytes.
    let two_byte = |len: usize| format!("/{}a", "é".repeat((len - 2) / 2));
    check(&two_byte(MAX_PATH_BYTES), Ok(()));
    check(
        &format!("/{}", "é".repeat(MAX_PATH_BYTES / 2)),
        Err(BadPath::TooLong),
    );
}

#[test]
fn each_unsafe_path_is_described_in_its_own_words() {
    let check = |why: BadPath, says: &str| {
        let text = why.describe();
        assert!(
            text.starts_with("the pass-through path "),
            "{why:?}: {text}"
        );
        assert!(text.contains(says), "{why:?}: {text}");
    };
    check(BadPath::TooLong, "too long");
    check(BadPath::DotSegment, "`.` or `..` segments");
    check(BadPath::Separator, "an encoded `/` or `\\`");
    check(BadPath::EmptySegment, "`//`");
}
