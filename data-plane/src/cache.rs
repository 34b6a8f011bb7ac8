//! `SWITCHYARD_SNAPSHOT_CACHE`: the last known good snapshot on local disk, so a proxy that
//! restarts while the control plane is unreachable still serves.
//!
//! The file holds credentials as the control plane sent them; it is written with mode 0600 and
//! replaced atomically: a fresh temporary file is created exclusively (`O_CREAT|O_EXCL`, which
//! never follows a symlink and never reuses a file someone else left there), given mode 0600
//! explicitly, written, synced and renamed over the cache (rename replaces a symlink at the
//! cache path rather than writing through it).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use switchyard_engine::{
    Channel, LimitRule, Price, Route, Settings, Snapshot, SnapshotParts, Team, Token,
};

use crate::snapshot::SnapshotReceiver;

#[derive(Serialize, Deserialize)]
struct Cached {
    revision: u64,
    settings: Settings,
    routes: Vec<Route>,
    channels: Vec<Channel>,
    teams: Vec<Team>,
    tokens: Vec<Token>,
    #[serde(default)]
    prices: Vec<Price>,
    #[serde(default)]
    limits: Vec<LimitRule>,
    #[serde(default)]
    shadows: Vec<switchyard_engine::ShadowRule>,
    #[serde(default)]
    cache_rules: Vec<switchyard_engine::CacheRule>,
    #[serde(default)]
    guardrails: Vec<switchyard_engine::guard::rule::Guardrail>,
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
        prices: parts.prices,
        limits: parts.limits,
        shadows: parts.shadows,
        cache_rules: parts.cache_rules,
        guardrails: parts.guardrails,
    };
    let json =
        serde_json::to_vec(&cached).map_err(|e| format!("cannot encode the snapshot: {e}"))?;
    let tmp = write_private_temp(path, &json).map_err(|e| {
        format!(
            "cannot write a temporary file beside {}: {e}",
            path.display()
        )
    })?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot replace {}: {e}", path.display())
    })
}

/// Creates a new file beside `path` that nobody else can have prepared (exclusive create, a
/// name not used before), mode 0600, with `bytes` in it; returns its path.
fn write_private_temp(path: &Path, bytes: &[u8]) -> std::io::Result<PathBuf> {
    use std::io::Write;
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut attempts = 0;
    loop {
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let tmp = PathBuf::from(format!(
            "{}.{}.{n}.{nanos:08x}.tmp",
            path.display(),
            std::process::id()
        ));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = match options.open(&tmp) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempts < 16 => {
                attempts += 1;
                continue;
            }
            Err(e) => return Err(e),
        };
        // The umask cannot widen 0600, but set it explicitly anyway.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        let written = file.write_all(bytes).and_then(|()| file.sync_all());
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        return Ok(tmp);
    }
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
        prices: cached.prices,
        limits: cached.limits,
        shadows: cached.shadows,
        cache_rules: cached.cache_rules,
        guardrails: cached.guardrails,
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
        let yaml = "channels:\n  - name: a\n    provider: openai\n    base_url: http://x\n    credentials: [k]\n    passthrough: [/v1/files]\nroutes:\n  - model_pattern: m\n    members:\n      - channel: a\ntokens:\n  - name: t\n    token: s\n";
        let snapshot = Snapshot::new(crate::config::parse_yaml(yaml, 7).unwrap());
        let dir = std::env::temp_dir().join(format!("switchyard-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("snapshot.json");
        save(&path, &snapshot).unwrap();
        let back = load(&path).unwrap().unwrap();
        assert_eq!(back.revision, 7);
        assert_eq!(back.routes(), snapshot.routes());
        assert_eq!(back.tokens(), snapshot.tokens());
        let channels = |s: &Snapshot| s.channels().cloned().collect::<Vec<_>>();
        assert_eq!(channels(&back), channels(&snapshot));
        assert_eq!(channels(&back)[0].passthrough, ["/v1/files"]);
        assert!(load(&dir.join("absent.json")).unwrap().is_none());
    }

    #[cfg(unix)]
    #[test]
    fn the_cache_stays_private_with_a_hostile_tmp_file_or_symlink_in_place() {
        use std::os::unix::fs::{symlink, PermissionsExt};
        let yaml = "channels:\n  - name: a\n    provider: openai\n    base_url: http://x\n    credentials: [k]\nroutes:\n  - model_pattern: m\n    members:\n      - channel: a\ntokens:\n  - name: t\n    token: s\n";
        let snapshot = Snapshot::new(crate::config::parse_yaml(yaml, 3).unwrap());
        let dir =
            std::env::temp_dir().join(format!("switchyard-cache-hostile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("snapshot.json");
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777;

        // A world-readable file at the old fixed temporary name, and a symlink there too.
        let planted = dir.join("snapshot.json.tmp");
        std::fs::write(&planted, b"planted").unwrap();
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o644)).unwrap();
        save(&path, &snapshot).unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(std::fs::read(&planted).unwrap(), b"planted", "left alone");

        // A symlink at the cache path pointing at a world-readable file elsewhere: the link is
        // replaced, the target never written.
        let target = dir.join("elsewhere.json");
        std::fs::write(&target, b"public").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::remove_file(&path).unwrap();
        symlink(&target, &path).unwrap();
        save(&path, &snapshot).unwrap();
        assert!(!std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(mode(&path), 0o600);
        assert_eq!(std::fs::read(&target).unwrap(), b"public");
        assert_eq!(load(&path).unwrap().unwrap().revision, 3);

        // No temporary files are left behind.
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp") && n != "snapshot.json.tmp")
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
