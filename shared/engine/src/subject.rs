//! Limits on what a request says about itself: a tag, or the end user it is made for.
//!
//! A request carries tags and an end user (its attribution). A `tag` limit counts every request
//! carrying its tag; an `end_user` limit naming an end user counts that end user's requests; an
//! `end_user` limit naming none counts **each end user on a counter of its own** (a quota per
//! customer), and a request without an end user is not counted by it. Each such limit counts on a
//! counter named by its own id (never shared with another limit); an each-end-user limit's
//! counter is further named by the end user's counter id, which the proxy derives from the end
//! user (a digest: the same on every proxy, and no end user's name in a shared key).

use crate::fxhash::FxHashMap;
use crate::limit::{Limit, LimitOnly, LimitRule, ScopeKind};

/// Longest tag (every allowed character is one byte).
pub const MAX_TAG_LEN: usize = 64;
/// Longest end user (characters).
pub const MAX_END_USER_CHARS: usize = 256;

/// Whether `b` may appear in a tag: ASCII letters and digits, `_`, `-`, `.`, `:`, `/` and `=`
/// (no comma, so a list of tags joins and splits on commas unambiguously).
pub fn tag_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':' | b'/' | b'=')
}

/// Whether `tag` is a tag: 1 to [`MAX_TAG_LEN`] characters of [`tag_byte`]'s set.
pub fn valid_tag(tag: &str) -> bool {
    (1..=MAX_TAG_LEN).contains(&tag.len()) && tag.bytes().all(tag_byte)
}

/// A limit's subject from the fields an operator wrote: `tag` for a `tag` limit (required),
/// `end_user` for an `end_user` limit (absent: each end user separately); neither for another
/// scope. The error names the field.
pub fn subject_of(
    scope: ScopeKind,
    tag: Option<String>,
    end_user: Option<String>,
) -> Result<Option<String>, (&'static str, String)> {
    match scope {
        ScopeKind::Tag => {
            if end_user.is_some() {
                return Err(("end_user", "a `tag` limit names no end user".to_owned()));
            }
            let tag = tag.ok_or(("tag", "a `tag` limit names its tag".to_owned()))?;
            if !valid_tag(&tag) {
                return Err((
                    "tag",
                    format!(
                        "a tag is 1 to {MAX_TAG_LEN} characters of ASCII letters, digits and \
                         _ - . : / ="
                    ),
                ));
            }
            Ok(Some(tag))
        }
        ScopeKind::EndUser => {
            if tag.is_some() {
                return Err(("tag", "an `end_user` limit names no tag".to_owned()));
            }
            match end_user {
                None => Ok(None),
                Some(user) if user.is_empty() || user.chars().count() > MAX_END_USER_CHARS => {
                    Err((
                        "end_user",
                        format!(
                            "an end user is 1 to {MAX_END_USER_CHARS} characters (leave it out to \
                         count each end user separately)"
                        ),
                    ))
                }
                Some(user) if user.contains('\0') => {
                    Err(("end_user", "an end user has no NUL character".to_owned()))
                }
                Some(user) => Ok(Some(user)),
            }
        }
        _ => {
            if tag.is_some() {
                return Err(("tag", "only a `tag` limit names a tag".to_owned()));
            }
            if end_user.is_some() {
                return Err((
                    "end_user",
                    "only an `end_user` limit names an end user".to_owned(),
                ));
            }
            Ok(None)
        }
    }
}

/// An end user's counter id: the first 63 bits of the SHA-256 of its name (never 0, which
/// stands for no end user's own counter). The same on every proxy, so a fleet shares one
/// counter per end user, and no end user's name is written into the shared store; a digest,
/// so a client cannot choose a name that lands on another end user's counter.
pub fn end_user_counter(user: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(user.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (i64::from_be_bytes(first) & i64::MAX).max(1)
}

/// What a request says about itself, as its limits need it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Attribution<'a> {
    pub tags: &'a [String],
    /// The end user and its counter id (the same on every proxy; see the module doc).
    pub end_user: Option<(&'a str, i64)>,
}

/// The tag and end user limits of a snapshot, indexed for a request's attribution.
#[derive(Debug, Clone, Default)]
pub struct SubjectLimits {
    by_tag: FxHashMap<String, Vec<(LimitOnly, Limit)>>,
    by_end_user: FxHashMap<String, Vec<(LimitOnly, Limit)>>,
    each_end_user: Vec<(LimitOnly, Limit)>,
}

impl SubjectLimits {
    /// The index of the tag and end user limits among `rules` (in the order given).
    pub fn new(rules: &[LimitRule]) -> SubjectLimits {
        let mut out = SubjectLimits::default();
        for rule in rules {
            let entry = (rule.only.clone(), rule.limit);
            match (rule.limit.key.scope, &rule.subject) {
                (ScopeKind::Tag, Some(tag)) => {
                    out.by_tag.entry(tag.clone()).or_default().push(entry)
                }
                (ScopeKind::EndUser, Some(user)) => {
                    out.by_end_user.entry(user.clone()).or_default().push(entry)
                }
                (ScopeKind::EndUser, None) => out.each_end_user.push(entry),
                _ => {}
            }
        }
        out
    }

    /// Whether a limit counts each end user separately (the proxy derives an end user's counter
    /// id only then).
    pub fn counts_each_end_user(&self) -> bool {
        !self.each_end_user.is_empty()
    }

    /// What a request with `tags` and `end_user` says about itself, as these limits need it: the
    /// end user's counter id is derived only when a limit counts each end user separately (0
    /// otherwise: no such counter is named).
    pub fn attribution<'a>(
        &self,
        tags: &'a [String],
        end_user: Option<&'a str>,
    ) -> Attribution<'a> {
        let counts_each = self.counts_each_end_user();
        Attribution {
            tags,
            end_user: end_user.map(|user| {
                let id = if counts_each {
                    end_user_counter(user)
                } else {
                    0
                };
                (user, id)
            }),
        }
    }

    /// Whether there is no tag or end user limit at all.
    pub fn is_empty(&self) -> bool {
        self.by_tag.is_empty() && self.by_end_user.is_empty() && self.each_end_user.is_empty()
    }

    /// The limits a request with `who`'s tags and end user, for `model` through `route`,
    /// counts on: its tags' (each tag once: a request's tags are distinct), its end user's, and
    /// each each-end-user limit on the end user's own counter (none without an end user).
    pub fn of<'a>(
        &'a self,
        who: Attribution<'a>,
        model: Option<&'a str>,
        route: Option<i64>,
    ) -> impl Iterator<Item = Limit> + 'a {
        let tagged = who
            .tags
            .iter()
            .filter_map(|tag| self.by_tag.get(tag))
            .flatten();
        let named = who
            .end_user
            .and_then(|(user, _)| self.by_end_user.get(user))
            .into_iter()
            .flatten();
        let each = who
            .end_user
            .map_or(&[][..], |_| self.each_end_user.as_slice())
            .iter()
            .map(move |(only, limit)| {
                let mut limit = *limit;
                limit.key.scope_id = who.end_user.map_or(0, |(_, id)| id);
                (only, limit)
            });
        tagged
            .chain(named)
            .map(|(only, limit)| (only, *limit))
            .chain(each)
            .filter(move |(only, _)| only.applies(model, route))
            .map(|(_, limit)| limit)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::limit::{Limit, LimitKey};

    fn rule(id: i64, scope: &str, subject: Option<&str>, only: LimitOnly) -> LimitRule {
        let limit = Limit::parse(scope, 0, "requests", Some("minute"), 10, "hard").unwrap();
        LimitRule::new(id, limit, only).about(subject.map(str::to_owned))
    }

    fn ids(limits: impl Iterator<Item = Limit>) -> Vec<(Option<i64>, i64)> {
        limits.map(|l| (l.key.rule, l.key.scope_id)).collect()
    }

    #[test]
    fn a_subject_is_required_for_a_tag_optional_for_an_end_user_and_refused_elsewhere() {
        let s = |scope, tag: Option<&str>, user: Option<&str>| {
            subject_of(scope, tag.map(str::to_owned), user.map(str::to_owned))
        };
        assert_eq!(
            s(ScopeKind::Tag, Some("acme"), None),
            Ok(Some("acme".into()))
        );
        assert_eq!(s(ScopeKind::Tag, None, None).unwrap_err().0, "tag");
        assert_eq!(s(ScopeKind::Tag, Some("a b"), None).unwrap_err().0, "tag");
        assert_eq!(s(ScopeKind::Tag, Some(""), None).unwrap_err().0, "tag");
        assert_eq!(
            s(ScopeKind::Tag, Some(&"a".repeat(65)), None)
                .unwrap_err()
                .0,
            "tag"
        );
        assert!(s(ScopeKind::Tag, Some(&"a".repeat(64)), None).is_ok());
        assert_eq!(
            s(ScopeKind::Tag, Some("a"), Some("u")).unwrap_err().0,
            "end_user"
        );
        assert_eq!(s(ScopeKind::EndUser, None, None), Ok(None));
        assert_eq!(
            s(ScopeKind::EndUser, None, Some("u1")),
            Ok(Some("u1".into()))
        );
        assert_eq!(
            s(ScopeKind::EndUser, None, Some("")).unwrap_err().0,
            "end_user"
        );
        assert!(s(ScopeKind::EndUser, None, Some(&"é".repeat(256))).is_ok());
        assert_eq!(
            s(ScopeKind::EndUser, None, Some(&"é".repeat(257)))
                .unwrap_err()
                .0,
            "end_user"
        );
        assert_eq!(
            s(ScopeKind::EndUser, None, Some("a\0b")).unwrap_err().0,
            "end_user"
        );
        assert_eq!(s(ScopeKind::EndUser, Some("t"), None).unwrap_err().0, "tag");
        for scope in [ScopeKind::Token, ScopeKind::Team, ScopeKind::Member] {
            assert_eq!(s(scope, None, None), Ok(None));
            assert_eq!(s(scope, Some("t"), None).unwrap_err().0, "tag");
            assert_eq!(s(scope, None, Some("u")).unwrap_err().0, "end_user");
        }
    }

    #[test]
    fn the_index_is_empty_only_without_any_tag_or_end_user_limit() {
        assert!(SubjectLimits::new(&[]).is_empty());
        let token = rule(1, "token", None, LimitOnly::default());
        assert!(SubjectLimits::new(std::slice::from_ref(&token)).is_empty());
        for one in [
            rule(2, "tag", Some("acme"), LimitOnly::default()),
            rule(3, "end_user", Some("alice"), LimitOnly::default()),
            rule(4, "end_user", None, LimitOnly::default()),
        ] {
            let index = SubjectLimits::new(&[token.clone(), one.clone()]);
            assert!(!index.is_empty(), "{one:?}");
        }
    }

    #[test]
    fn a_tag_or_end_user_limit_counts_on_its_own_counter() {
        let tag = rule(7, "tag", Some("acme"), LimitOnly::default());
        assert_eq!(tag.limit.key.rule, Some(7));
        assert_eq!(tag.limit.key.scope_id, 0);
        assert_eq!(tag.limit.key.name(), "tag:0:requests:minute:r7");
        let each = rule(8, "end_user", None, LimitOnly::default());
        assert_eq!(each.limit.key.name(), "end_user:0:requests:minute:r8");
    }

    #[test]
    fn a_request_counts_on_its_tags_its_end_user_and_its_own_each_end_user_counter() {
        let narrowed = LimitOnly {
            model_pattern: Some("gpt-*".into()),
            route_id: None,
        };
        let rules = [
            rule(1, "tag", Some("acme"), LimitOnly::default()),
            rule(2, "tag", Some("beta"), LimitOnly::default()),
            rule(3, "end_user", Some("alice"), LimitOnly::default()),
            rule(4, "end_user", None, LimitOnly::default()),
            rule(5, "end_user", None, narrowed),
            rule(6, "token", None, LimitOnly::default()),
        ];
        let index = SubjectLimits::new(&rules);
        assert!(index.counts_each_end_user() && !index.is_empty());
        let tags = ["acme".to_owned(), "other".to_owned()];
        let all = Attribution {
            tags: &tags,
            end_user: Some(("alice", 99)),
        };
        assert_eq!(
            ids(index.of(all, Some("gpt-4o"), None)),
            [(Some(1), 0), (Some(3), 0), (Some(4), 99), (Some(5), 99)]
        );
        assert_eq!(
            ids(index.of(all, Some("claude"), None)),
            [(Some(1), 0), (Some(3), 0), (Some(4), 99)],
            "the narrowed one only for its models"
        );
        let bob = Attribution {
            tags: &[],
            end_user: Some(("bob", 5)),
        };
        assert_eq!(ids(index.of(bob, None, None)), [(Some(4), 5)]);
        let nobody = Attribution::default();
        assert_eq!(
            ids(index.of(nobody, Some("gpt-4o"), None)),
            [],
            "no end user: not counted by an each-end-user limit"
        );
        let empty = SubjectLimits::new(&rules[5..]);
        assert!(empty.is_empty() && !empty.counts_each_end_user());
        let key = LimitKey {
            scope_id: 99,
            ..index.of(all, None, None).nth(2).unwrap().key
        };
        assert_eq!(key.name(), "end_user:99:requests:minute:r4");
    }
    #[test]
    fn an_end_users_counter_id_is_a_stable_digest_never_zero() {
        assert_eq!(end_user_counter("alice"), end_user_counter("alice"));
        assert_ne!(end_user_counter("alice"), end_user_counter("bob"));
        assert_ne!(end_user_counter("alice"), end_user_counter("alice "));
        // SHA-256("alice") begins 2bd806c97f0e00af: its first 63 bits.
        assert_eq!(end_user_counter("alice"), 0x2bd8_06c9_7f0e_00af);
        // SHA-256("") begins e3b0c44298fc1c14: the top bit is cleared.
        assert_eq!(end_user_counter(""), 0x63b0_c442_98fc_1c14);
        for user in ["", "a", "bob", "\u{0}"] {
            assert!(end_user_counter(user) > 0, "{user:?}");
        }
    }

    #[test]
    fn an_end_users_counter_is_derived_only_when_a_limit_counts_each_end_user() {
        let tags = ["acme".to_owned()];
        let named = SubjectLimits::new(&[rule(1, "end_user", Some("alice"), LimitOnly::default())]);
        let who = named.attribution(&tags, Some("alice"));
        assert_eq!(who.tags, tags);
        assert_eq!(who.end_user, Some(("alice", 0)));
        let each = SubjectLimits::new(&[rule(2, "end_user", None, LimitOnly::default())]);
        assert_eq!(
            each.attribution(&[], Some("alice")).end_user,
            Some(("alice", end_user_counter("alice")))
        );
        assert_eq!(each.attribution(&tags, None).end_user, None);
    }
}
