//! The size a configuration file may compile to. The file itself is bounded where it is parsed
//! (`switchyard_config`: its text, its expanded size, its nesting, each value); what the tables
//! compile from it is bounded here, as every proxy is sent it.

use switchyard_engine::Snapshot;

use crate::error::{ApiError, ApiResult};

/// Largest snapshot a configuration file may compile to, encoded as every proxy receives it.
pub const MAX_SNAPSHOT_BYTES: usize = 16 * 1024 * 1024;

/// Refuses a file whose compiled snapshot would be larger than `max` bytes (422, naming it).
pub fn check_snapshot_size(snapshot: &Snapshot, max: usize) -> ApiResult<()> {
    let bytes = prost::Message::encoded_len(&switchyard_proto::snapshot_to_proto(snapshot, 0));
    if bytes > max {
        // The whole file's problem, as config apply names one (`file`).
        return Err(ApiError::Validation {
            param: "file".to_owned(),
            message: format!(
                "file: compiles to a snapshot of {bytes} bytes; every proxy is sent it, and it \
                 may be at most {max} bytes"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::error::ApiError;

    #[test]
    fn the_bound_is_the_documented_16_mib() {
        // Written out, not derived: the reference and the config-as-code guide promise it.
        assert_eq!(MAX_SNAPSHOT_BYTES, 16_777_216);
    }

    #[test]
    fn a_snapshot_over_the_bound_is_refused_naming_its_size() {
        let parts = switchyard_config::parse_raw(
            "channels:\n- name: a\n  provider: mock\nroutes:\n- model_pattern: m\n  members:\n  - channel: a\n",
        )
        .unwrap()
        .into_parts(1, &|_| None)
        .unwrap();
        let snapshot = Snapshot::new(parts);
        let bytes = prost::Message::encoded_len(&switchyard_proto::snapshot_to_proto(&snapshot, 0));
        check_snapshot_size(&snapshot, bytes).unwrap();
        match check_snapshot_size(&snapshot, bytes - 1) {
            Err(ApiError::Validation { param, message }) => {
                assert_eq!(param, "file");
                assert!(
                    message.contains(&format!("snapshot of {bytes} bytes")),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
