//! The usage reports' wire contract: the bounds a usage record's figures keep, and the clock its
//! minute buckets are in. The proxy's buffer and report task are the data plane's
//! (`switchyard_data_plane::usage`); the control plane applies the batches.

use std::time::{SystemTime, UNIX_EPOCH};

/// The most tokens one request may add to one figure (input, output or cached) of a usage
/// record: the provider crate's per-request bound (`switchyard_provider::MAX_REQUEST_TOKENS`,
/// three upstream figures of at most a billion each). The control plane refuses a record whose
/// figure is beyond `requests` times this.
pub const MAX_TOKENS_PER_REQUEST: u64 = 3_000_000_000;

/// The most requests one usage record may count (one proxy's requests under one key in one
/// minute: a billion is far beyond any proxy). With [`MAX_TOKENS_PER_REQUEST`] this keeps every
/// valid record's figures below `i64::MAX`, Postgres' `bigint`.
pub const MAX_RECORD_REQUESTS: u64 = 1_000_000_000;

const _: () = assert!(MAX_RECORD_REQUESTS
    .checked_mul(MAX_TOKENS_PER_REQUEST)
    .is_some());
const _: () = assert!(MAX_RECORD_REQUESTS * MAX_TOKENS_PER_REQUEST <= i64::MAX as u64);

/// Now, in Unix seconds.
pub fn unix_now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Tags one request-log row carries at most.
pub const MAX_TAGS: usize = 16;

// A tag's and an end user's bounds are the engine's: a limit names them too.
pub use switchyard_engine::subject::{tag_byte, valid_tag, MAX_END_USER_CHARS, MAX_TAG_LEN};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_is_one_to_64_characters_of_its_set() {
        assert!(valid_tag("team:search/env=prod_1.a-b"));
        assert!(valid_tag(&"a".repeat(MAX_TAG_LEN)));
        assert!(!valid_tag(&"a".repeat(MAX_TAG_LEN + 1)));
        assert!(!valid_tag(""));
        for bad in ["a b", "a,b", "a;b", "é", "a\"b", "<a>"] {
            assert!(!valid_tag(bad), "{bad}");
        }
    }
}
