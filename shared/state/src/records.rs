//! Fleet-wide records that are not health or limits: small indexes with an expiry (a token's
//! files and batches, listed by the data plane) and once-only claims (a finished batch's usage
//! is accounted by one proxy of the fleet). Unlike the rest of the store these are not on any
//! proxied request's path and not kept in a local view: every call answers from the fleet's
//! copy (the Redis store asks Redis, within [`RECORD_TIMEOUT`]), so two proxies agree at once;
//! callers of the files and batches endpoints await them.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use switchyard_engine::UnixMillis;

/// How long the Redis store waits for Redis on one record call before answering
/// [`RecordError::Unavailable`].
pub const RECORD_TIMEOUT: Duration = Duration::from_secs(2);

/// The most entries one index keeps: a put beyond it evicts the entry that expires first.
pub const MAX_INDEX_ENTRIES: usize = 2_000;

/// The longest index name, member or value a store takes (longer ones are refused).
pub const MAX_RECORD_BYTES: usize = 16 * 1024;

/// Why a record call did not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    /// The fleet's copy could not be reached in time (Redis away); nothing is known.
    Unavailable(String),
    /// A name, member or value over [`MAX_RECORD_BYTES`].
    TooLarge,
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::Unavailable(why) => write!(f, "the shared state is unavailable: {why}"),
            RecordError::TooLarge => write!(f, "a record over {MAX_RECORD_BYTES} bytes"),
        }
    }
}

/// A record call's answer, to be awaited (boxed: the trait stays object-safe).
pub type RecordFuture<T> = Pin<Box<dyn Future<Output = Result<T, RecordError>> + Send>>;

/// One index entry: its member (the key within the index), its value and its expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    pub member: String,
    pub value: String,
    pub expires_at: UnixMillis,
}

/// Refuses the parts of a record over the bound.
pub(crate) fn check_sizes(parts: &[&str]) -> Result<(), RecordError> {
    if parts.iter().any(|p| p.len() > MAX_RECORD_BYTES) {
        return Err(RecordError::TooLarge);
    }
    Ok(())
}

/// A ready answer, boxed.
pub(crate) fn ready<T: Send + 'static>(value: Result<T, RecordError>) -> RecordFuture<T> {
    Box::pin(std::future::ready(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_error_says_what_went_wrong() {
        assert_eq!(
            RecordError::TooLarge.to_string(),
            "a record over 16384 bytes"
        );
        assert_eq!(
            RecordError::Unavailable("connection refused".into()).to_string(),
            "the shared state is unavailable: connection refused"
        );
    }
}
