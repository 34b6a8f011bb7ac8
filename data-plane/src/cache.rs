//! `SWITCHYARD_SNAPSHOT_CACHE`: the last known good snapshot on local disk, so a proxy that
//! restarts while the control plane is unreachable still serves.
//!
//! The file holds credentials as the control plane sent them; it is written with mode 0600 and
//! replaced atomically (write to a temporary file, then rename).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use switchyard_engine::{Channel, Route, Settings, Snapshot, SnapshotParts, Team, Token};

use crate::snapshot::SnapshotReceiver;

#[derive(Serialize, Deserialize)]
struct Cached {
    revision: u64,
    settings: Settings,
    routes: Vec<Route>,
    channels: Vec<Channel>,
    teams: Vec<Team>,
    tokens: Vec<Token>,
}

pub fn save(path: &Path, snapshot: &Snapshot) -> Result<(), String> {
    let parts = snapshot.to_parts();
    let cached = Cached {
        revision: parts.revision,
        settings: parts.settings,
        routes: parts.routes,
        channels: parts.channels,
        teams: parts.teams,
        tokens: parts.tokens,
    };
    let json =
        serde_json::to_vec(&cached).map_err(|e| format!("cannot encode the snapshot: {e}"))?;
    let tmp = PathBuf::from(format!("{}.tmp", path.display()));
    write_private(&tmp, &json).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("cannot replace {}: {e}", path.display()))
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// The cached snapshot, if the file exists and is readable.
pub fn load(path: &Path) -> Result<Option<Snapshot>, String> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let cached: Cached = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{} is not a snapshot cache: {e}", path.display()))?;
    Ok(Some(Snapshot::new(SnapshotParts {
        revision: cached.revision,
        settings: cached.settings,
        routes: cached.routes,
        channels: cached.channels,
        teams: cached.teams,
        tokens: cached.tokens,
    })))
}

/// Writes every new snapshot to `path` until the source closes.
pub async fn persist(path: PathBuf, mut rx: SnapshotReceiver) {
    let mut written = None;
    loop {
        let current: Option<Arc<Snapshot>> = rx.borrow_and_update().clone();
        if let Some(snapshot) = current {
            if written != Some(snapshot.revision) {
                let path = path.clone();
                let revision = snapshot.revision;
                let saved = tokio::task::spawn_blocking(move || save(&path, &snapshot)).await;
                match saved {
                    Ok(Ok(())) => written = Some(revision),
                    Ok(Err(e)) => tracing::warn!(error = %e, "snapshot cache not written"),
                    Err(e) => tracing::warn!(error = %e, "snapshot cache task failed"),
                }
            }
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_snapshot_loads_back_identical() {
        let yaml = "channels:\n  - name: a\n    provider: openai\n    base_url: http://x\n    credentials: [k]\nroutes:\n  - model_pattern: m\n    members:\n      - channel: a\ntokens:\n  - name: t\n    token: s\n";
        let snapshot = Snapshot::new(crate::config::parse_yaml(yaml, 7).unwrap());
        let dir = std::env::temp_dir().join(format!("switchyard-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("snapshot.json");
        save(&path, &snapshot).unwrap();
        let back = load(&path).unwrap().unwrap();
        assert_eq!(back.revision, 7);
        assert_eq!(back.routes(), snapshot.routes());
        assert_eq!(back.tokens(), snapshot.tokens());
        assert!(load(&dir.join("absent.json")).unwrap().is_none());
    }
}
