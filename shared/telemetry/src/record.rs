//! Structured records written beside the tracing log, in the same flat JSON line shape
//! (`timestamp`, `level`, `target`, `message`, then the fields at top level), for lines whose
//! fields are themselves JSON — the data plane's request line carries its attempt trail and usage
//! as JSON values, which `tracing`'s formatter can only write as strings.

use std::io::Write;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};
use tracing_appender::non_blocking::NonBlocking;

static WRITER: OnceLock<NonBlocking> = OnceLock::new();

/// Called by [`crate::init`] with the log's own writer, so records and log lines interleave in
/// one ordered stream and never block the caller.
pub(crate) fn set_writer(writer: NonBlocking) {
    let _ = WRITER.set(writer);
}

/// Whether a record at INFO for `target` would be written (the `RUST_LOG` filter applies).
#[macro_export]
macro_rules! record_enabled {
    () => {
        ::tracing::enabled!(::tracing::Level::INFO)
    };
}

/// Writes one INFO record: `message` plus `fields`. Does nothing before [`crate::init`] (tests
/// that build the app in-process) — callers check [`record_enabled!`] first to skip building the
/// fields when the filter drops them.
pub fn write(target: &str, message: &str, fields: Map<String, Value>) {
    let Some(writer) = WRITER.get() else {
        return;
    };
    let mut line = Map::with_capacity(fields.len() + 4);
    line.insert("timestamp".into(), Value::String(rfc3339_now()));
    line.insert("level".into(), Value::String("INFO".into()));
    line.insert("target".into(), Value::String(target.to_owned()));
    line.insert("message".into(), Value::String(message.to_owned()));
    line.extend(fields);
    let Ok(mut bytes) = serde_json::to_vec(&Value::Object(line)) else {
        return;
    };
    bytes.push(b'\n');
    let mut writer = writer.clone();
    let _ = writer.write_all(&bytes);
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ` (UTC), as the JSON log formatter writes its timestamps.
fn rfc3339_now() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format_rfc3339(now.as_secs(), now.subsec_micros())
}

fn format_rfc3339(secs: u64, micros: u32) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(format_rfc3339(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            format_rfc3339(951_782_400, 5),
            "2000-02-29T00:00:00.000005Z"
        );
        assert_eq!(
            format_rfc3339(1_796_111_999, 999_999),
            "2026-12-01T07:59:59.999999Z"
        );
    }
}
