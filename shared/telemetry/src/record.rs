//! Structured records written beside the tracing log, in the same flat JSON line shape
//! (`timestamp`, `level`, `target`, `message`, then the fields at top level), for lines whose
//! fields are themselves JSON — the data plane's request line carries its attempt trail and usage
//! as JSON values, which `tracing`'s formatter can only write as strings.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::batch::BatchWriter;
use crate::json;
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

/// Writes one INFO record whose fields the caller writes itself, straight into the line's
/// buffer: `fields` gets the buffer just after the four standard keys and appends each field as
/// `,"key":value` — a comma first, then the key and its value as JSON (see [`crate::json`]). The
/// line is closed after it. Like [`write`], does nothing before [`crate::init`].
pub fn write_with(target: &str, message: &str, fields: impl FnOnce(&mut Vec<u8>)) {
    let Some(writer) = WRITER.get() else {
        return;
    };
    writer.append(&line_with(&rfc3339_now(), target, message, fields));
}

/// The four standard keys, with the object left open for the fields.
fn head(timestamp: &str, target: &str, message: &str) -> Vec<u8> {
    // Request lines run 500–700 bytes: room for one without growing.
    let mut bytes = Vec::with_capacity(1024);
    bytes.extend_from_slice(b"{\"timestamp\":");
    json::string(&mut bytes, timestamp);
    bytes.extend_from_slice(b",\"level\":\"INFO\",\"target\":");
    json::string(&mut bytes, target);
    bytes.extend_from_slice(b",\"message\":");
    json::string(&mut bytes, message);
    bytes
}

/// The record's bytes, newline-terminated; `None` when `fields` is not a JSON object.
fn line(timestamp: &str, target: &str, message: &str, fields: &impl Serialize) -> Option<Vec<u8>> {
    let mut bytes = head(timestamp, target, message);
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

/// The record's bytes with fields written by `fields` (each as `,"key":value`),
/// newline-terminated.
fn line_with(
    timestamp: &str,
    target: &str,
    message: &str,
    fields: impl FnOnce(&mut Vec<u8>),
) -> Vec<u8> {
    let mut bytes = head(timestamp, target, message);
    fields(&mut bytes);
    bytes.extend_from_slice(b"}\n");
    bytes
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
    fn a_record_with_hand_written_fields_is_the_same_line_as_one_serialized() {
        #[derive(Serialize)]
        struct Fields<'a> {
            request_id: &'a str,
            status: u16,
        }
        let fields = Fields {
            request_id: "r\"1\u{1}é",
            status: 200,
        };
        for (target, message) in [("t::x", "request"), ("t\"q\\", "m\n🦀"), ("", "")] {
            let serialized = line("2026-12-01T00:00:00.000000Z", target, message, &fields).unwrap();
            let written = line_with("2026-12-01T00:00:00.000000Z", target, message, |out| {
                out.extend_from_slice(b",\"request_id\":");
                json::string(out, fields.request_id);
                out.extend_from_slice(b",\"status\":");
                json::integer(out, fields.status);
            });
            assert_eq!(
                String::from_utf8(written).unwrap(),
                String::from_utf8(serialized).unwrap()
            );
            let empty = line_with("ts", target, message, |_| {});
            #[derive(Serialize)]
            struct Empty {}
            assert_eq!(empty, line("ts", target, message, &Empty {}).unwrap());
        }
    }

    #[test]
    fn the_standard_keys_are_written_as_serde_json_writes_them() {
        for (timestamp, target, message) in [
            (
                "2026-12-01T00:00:00.000000Z",
                "switchyard_data_plane::request",
                "request",
            ),
            ("", "a\"b", "c\\d\u{0}\u{1f}/é🦀"),
        ] {
            let mut expected = b"{\"timestamp\":".to_vec();
            serde_json::to_writer(&mut expected, timestamp).unwrap();
            expected.extend_from_slice(b",\"level\":\"INFO\",\"target\":");
            serde_json::to_writer(&mut expected, target).unwrap();
            expected.extend_from_slice(b",\"message\":");
            serde_json::to_writer(&mut expected, message).unwrap();
            assert_eq!(head(timestamp, target, message), expected);
        }
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
