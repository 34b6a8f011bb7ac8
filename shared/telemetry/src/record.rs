//! Structured records written beside the tracing log, in the same flat JSON line shape
//! (`timestamp`, `level`, `target`, `message`, then the fields at top level), for lines whose
//! fields are themselves JSON — the data plane's request line carries its attempt trail and usage
//! as JSON values, which `tracing`'s formatter can only write as strings.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::batch::BatchWriter;
use serde::Serialize;

static WRITER: OnceLock<BatchWriter> = OnceLock::new();

/// Called by [`crate::init`] with the log's own writer, so records and log lines interleave in
/// one ordered stream and never block the caller.
pub(crate) fn set_writer(writer: BatchWriter) {
    let _ = WRITER.set(writer);
}

/// Whether a record at INFO for `target` would be written (the `RUST_LOG` filter applies).
#[macro_export]
macro_rules! record_enabled {
    () => {
        ::tracing::enabled!(::tracing::Level::INFO)
    };
}

/// Writes one INFO record: `message` plus the fields of `fields` (which must serialize as a
/// JSON object; anything else is dropped). Does nothing before [`crate::init`] (tests that build
/// the app in-process) — callers check [`record_enabled!`] first to skip gathering the fields when
/// the filter drops them. The line is built in one buffer: the four standard keys, then the
/// fields' own keys in their serialization order.
pub fn write(target: &str, message: &str, fields: &impl Serialize) {
    let Some(writer) = WRITER.get() else {
        return;
    };
    let Some(bytes) = line(&rfc3339_now(), target, message, fields) else {
        return;
    };
    writer.append(&bytes);
}

/// The record's bytes, newline-terminated; `None` when `fields` is not a JSON object.
fn line(timestamp: &str, target: &str, message: &str, fields: &impl Serialize) -> Option<Vec<u8>> {
    let mut bytes = Vec::with_capacity(512);
    bytes.extend_from_slice(b"{\"timestamp\":");
    serde_json::to_writer(&mut bytes, timestamp).ok()?;
    bytes.extend_from_slice(b",\"level\":\"INFO\",\"target\":");
    serde_json::to_writer(&mut bytes, target).ok()?;
    bytes.extend_from_slice(b",\"message\":");
    serde_json::to_writer(&mut bytes, message).ok()?;
    let head = bytes.len();
    serde_json::to_writer(&mut bytes, fields).ok()?;
    // `fields` wrote `{...}`: its opening brace becomes the comma after the standard keys (or,
    // for an empty object, the whole `{}` goes and the line just closes).
    match bytes.get(head..) {
        Some(b"{}") => {
            bytes.truncate(head);
            bytes.push(b'}');
        }
        Some([b'{', ..]) => bytes[head] = b',',
        _ => return None,
    }
    bytes.push(b'\n');
    Some(bytes)
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
    // Written digit by digit (this runs once per request line; `format!` cost more than the
    // rest of the timestamp together).
    let mut out = String::with_capacity(27);
    let digits = |value: u64, width: u32, out: &mut String| {
        for place in (0..width).rev() {
            let digit = (value / 10u64.pow(place)) % 10;
            out.push(char::from(b'0' + digit as u8));
        }
    };
    digits(year.clamp(0, 9_999) as u64, 4, &mut out);
    out.push('-');
    digits(month as u64, 2, &mut out);
    out.push('-');
    digits(day as u64, 2, &mut out);
    out.push('T');
    digits(rem / 3_600, 2, &mut out);
    out.push(':');
    digits(rem % 3_600 / 60, 2, &mut out);
    out.push(':');
    digits(rem % 60, 2, &mut out);
    out.push('.');
    digits(u64::from(micros.min(999_999)), 6, &mut out);
    out.push('Z');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_one_flat_json_line_with_the_standard_keys_first() {
        #[derive(Serialize)]
        struct Fields<'a> {
            request_id: &'a str,
            status: u16,
            usage: serde_json::Value,
        }
        let fields = Fields {
            request_id: "r\"1",
            status: 200,
            usage: serde_json::json!({"input_tokens": 3}),
        };
        let bytes = line("2026-12-01T00:00:00.000000Z", "t::x", "request", &fields).unwrap();
        let text = std::str::from_utf8(&bytes).unwrap();
        assert!(text.ends_with('\n') && !text[..text.len() - 1].contains('\n'));
        assert!(text.starts_with(r#"{"timestamp":"2026-12-01T00:00:00.000000Z","level":"INFO","target":"t::x","message":"request","request_id""#), "{text}");
        let value: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(value["request_id"], "r\"1");
        assert_eq!(value["status"], 200);
        assert_eq!(value["usage"]["input_tokens"], 3);
        assert_eq!(value.as_object().unwrap().len(), 7);
    }

    #[test]
    fn an_empty_record_closes_after_the_standard_keys_and_a_non_object_is_dropped() {
        #[derive(Serialize)]
        struct Empty {}
        let bytes = line("ts", "t", "m", &Empty {}).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(value.as_object().unwrap().len(), 4);
        assert_eq!(line("ts", "t", "m", &42), None);
        assert_eq!(line("ts", "t", "m", &"text"), None);
    }

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
        assert_eq!(
            format_rfc3339(4_102_444_799, 123_456),
            "2099-12-31T23:59:59.123456Z"
        );
        assert_eq!(
            format_rfc3339(1_709_210_096, 42),
            "2024-02-29T12:34:56.000042Z"
        );
    }
}
