//! What every workload identity reads: its environment, its token files (bounded), expiry times;
//! and how an identity endpoint's refusal is told.

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use crate::token::{Answer, TokenError};

/// Most bytes of a token or credentials file read.
const MAX_FILE: u64 = 64 * 1024;

/// A non-empty environment variable.
pub(super) fn var(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// A token or credentials file's text, at most [`MAX_FILE`] bytes, trimmed (read at each
/// exchange: the kubelet rotates projected tokens).
pub(super) fn read_file(path: &Path) -> Result<String, TokenError> {
    let mut text = String::new();
    let read = std::fs::File::open(path)
        .and_then(|file| file.take(MAX_FILE + 1).read_to_string(&mut text));
    match read {
        Ok(n) if n as u64 <= MAX_FILE && !text.trim().is_empty() => Ok(text.trim().to_owned()),
        Ok(_) => {
            tracing::warn!(file = %path.display(), "workload identity token file is empty or too large");
            Err(TokenError::Request)
        }
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e.kind(), "workload identity token file could not be read");
            Err(TokenError::Request)
        }
    }
}

/// The refusal of an identity endpoint that answered `status`, with its words.
pub(super) fn refused(answer: &Answer, reason: String) -> TokenError {
    TokenError::Refused {
        status: answer.status,
        retry_after: answer.retry_after.clone(),
        reason,
    }
}

/// Seconds since the Unix epoch of an ISO 8601 UTC time (`2026-12-08T12:00:00Z`, fractional
/// seconds and `+00:00` accepted), `None` for anything else.
fn unix_seconds(text: &str) -> Option<i64> {
    let text = text.trim();
    let text = text
        .strip_suffix('Z')
        .or_else(|| text.strip_suffix("+00:00"))?;
    let (date, time) = text.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (d.next()??, d.next()??, d.next()??);
    let time = time.split('.').next()?;
    let mut t = time.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (h, m, s) = (t.next()??, t.next()??, t.next()??);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    let days = switchyard_engine::limit::days_from_civil(year, month, day);
    Some(days * 86_400 + h * 3600 + m * 60 + s)
}

/// How long a credential that expires at `expiration` (ISO 8601) has left; `None` when the
/// time cannot be read.
pub(super) fn lifetime_until(expiration: &str) -> Option<Duration> {
    let at = unix_seconds(expiration)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs();
    Some(Duration::from_secs(
        u64::try_from(at).ok()?.saturating_sub(now),
    ))
}

/// An environment of `vars` only, for tests.
#[cfg(test)]
pub(super) fn env_of(vars: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<String> {
    move |name| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expirations_are_read_as_utc() {
        assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(unix_seconds("2026-12-08T12:00:00Z"), Some(1_796_731_200));
        assert_eq!(
            unix_seconds("2026-12-08T12:00:00.123+00:00"),
            Some(1_796_731_200)
        );
        for bad in [
            "",
            "2026-12-08",
            "2026-13-08T00:00:00Z",
            "2026-12-08T12:00:00+02:00",
            "x",
        ] {
            assert_eq!(unix_seconds(bad), None, "{bad}");
        }
        assert_eq!(lifetime_until("1970-01-01T00:00:00Z"), Some(Duration::ZERO));
    }
}
