//! The book's fleet quick start (docs/src/getting-started/fleet.md), run as written by
//! `scripts/quickstart-fleet` against this crate's builds of both binaries, on free ports and a
//! database of its own: creating the database, starting the control plane, configuring mock
//! channels, a route and a token through the admin API, starting a proxy that follows it, and the
//! failover, cooldown, stream, explain and attempt trail the page says the reader will see.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::TcpListener;
use std::process::Command;

const CONTROL_PLANE: &str = env!("CARGO_BIN_EXE_e2e-control-plane");
const DATA_PLANE: &str = env!("CARGO_BIN_EXE_e2e-data-plane");
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/quickstart-fleet");

#[test]
fn the_readme_fleet_quick_start_works_as_written() {
    // Three distinct free ports (held together so none is handed out twice).
    let listeners: Vec<TcpListener> = (0..3)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let ports: Vec<String> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port().to_string())
        .collect();
    drop(listeners);
    let output = Command::new("bash")
        .arg(SCRIPT)
        .env("QUICKSTART_CONTROL_PLANE", CONTROL_PLANE)
        .env("QUICKSTART_DATA_PLANE", DATA_PLANE)
        .env("QUICKSTART_PORTS", ports.join(" "))
        .env(
            "QUICKSTART_DB",
            format!("switchyard_quickstart_{}", std::process::id()),
        )
        .env_remove("REDIS_URL")
        .env_remove("SWITCHYARD_FLEET_TOKEN")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "scripts/quickstart-fleet failed ({}):\n{stderr}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(
        stderr.contains("ok: failover on the first call"),
        "{stderr}"
    );
}
