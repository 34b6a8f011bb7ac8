//! Single sign-on against a real OpenID provider: `tests/console/issuer.mjs` runs the
//! `oidc-provider` package (PKCE required, test accounts with groups, new signing keys at every
//! start), and a real control plane (Postgres) is configured to trust it.
//!
//! - Bearer JWTs signed by the provider's own keys: accepted with the mapped role (RS256 and
//!   ES256), the audit log naming the person; tampered, expired, wrong-audience, `none` and
//!   unmapped tokens refused with their codes; after the provider restarts with new keys, a token
//!   signed by the new key is accepted (the keys are fetched again) and one by the old key no longer.
//! - The console in headless Chromium (`tests/console/sso.mjs`): people sign in through the
//!   provider's login page; roles, the session cookie, CSRF and sign-out (see that script).
//!
//! Missing node, Chromium or the npm packages is a failure, not a skip.
// Helpers outside #[test] fns are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use switchyard_e2e::control::database_url;
use switchyard_e2e::process::Process;

const CONTROL_PLANE: &str = env!("CARGO_BIN_EXE_e2e-control-plane");
const ADMIN_TOKEN: &str = "sso-admin-token-0123456789abcdef";
const CLIENT_ID: &str = "switchyard-console";
const CLIENT_SECRET: &str = "sso-client-secret-0123456789";
/// The whole browser session (a loaded 2-core machine starts Chromium slowly).
const BROWSER_PATIENCE: Duration = Duration::from_secs(300);

fn node() -> PathBuf {
    let node = std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("node"))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| panic!("node is not installed; scripts/test installs it"));
    let modules = console_dir().join("node_modules");
    for package in ["oidc-provider", "playwright-core"] {
        assert!(
            modules.join(package).join("package.json").is_file(),
            "{package} is not installed in {}; scripts/test runs `npm ci` there",
            console_dir().display()
        );
    }
    node
}

fn console_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("console")
}

/// An HTTP/1.1 call with these extra header lines: (status, JSON body).
async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
    body: Option<Value>,
) -> (u16, Value) {
    switchyard_e2e::raw_call(addr, method, path, headers, body).await
}

async fn bearer(
    addr: SocketAddr,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    call(
        addr,
        method,
        path,
        &format!("authorization: Bearer {token}\r\n"),
        body,
    )
    .await
}

/// The provider, the control plane trusting it, and where each listens.
struct Sso {
    node: PathBuf,
    issuer: Process,
    issuer_url: String,
    issuer_port: u16,
    _control_plane: Process,
    http: SocketAddr,
}

/// Starts the provider (on `port`, 0: any) for the control plane at `http`.
async fn start_issuer(node: &Path, http: SocketAddr, port: u16) -> (Process, String, u16) {
    let mut issuer = Process::spawn(
        "OpenID provider",
        Command::new(node)
            .arg(console_dir().join("issuer.mjs"))
            .env("ISSUER_PORT", port.to_string())
            .env("CLIENT_ID", CLIENT_ID)
            .env("CLIENT_SECRET", CLIENT_SECRET)
            .env(
                "REDIRECT_URI",
                format!("http://{http}/console/sso/callback"),
            ),
    );
    let (url, port) = issuer
        .wait_log("issuer listening", |log| {
            (log["message"] == "issuer listening").then(|| {
                (
                    log["issuer"].as_str().unwrap().to_owned(),
                    u16::try_from(log["port"].as_u64().unwrap()).unwrap(),
                )
            })
        })
        .await;
    (issuer, url, port)
}

impl Sso {
    async fn start(opts: &PgConnectOptions) -> Sso {
        let node = node();
        // The redirect URI is registered before the control plane starts: its port is chosen here.
        let http: SocketAddr = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap()
        };
        let (issuer, issuer_url, issuer_port) = start_issuer(&node, http, 0).await;
        let mut control_plane = Process::spawn(
            "control plane",
            Command::new(CONTROL_PLANE)
                .env("DATABASE_URL", database_url(opts))
                .env("SWITCHYARD_ADMIN_TOKEN", ADMIN_TOKEN)
                .env("SWITCHYARD_HTTP_ADDR", http.to_string())
                .env("SWITCHYARD_GRPC_ADDR", "127.0.0.1:0")
                .env_remove("REDIS_URL")
                .env("SWITCHYARD_SSO_ISSUER", &issuer_url)
                .env("SWITCHYARD_SSO_CLIENT_ID", CLIENT_ID)
                .env("SWITCHYARD_SSO_CLIENT_SECRET", CLIENT_SECRET)
                .env("SWITCHYARD_PUBLIC_URL", format!("http://{http}"))
                .env("SWITCHYARD_SSO_SCOPES", "openid email groups")
                .env(
                    "SWITCHYARD_SSO_ROLES",
                    "switchyard-admins=admin,switchyard-viewers=viewer,\
                     research-admins=admin@research,ghost-admins=admin@ghost",
                )
                .env("SWITCHYARD_SSO_KEYS_REFETCH_SECS", "0")
                .env("RUST_LOG", "info"),
        );
        control_plane
            .wait_log("listening", |log| {
                (log["message"] == "listening").then_some(())
            })
            .await;
        Sso {
            node,
            issuer,
            issuer_url,
            issuer_port,
            _control_plane: control_plane,
            http,
        }
    }

    /// A JWT signed by the provider's current key for `alg`.
    async fn sign(&self, alg: &str, claims: Value) -> String {
        let addr: SocketAddr = format!("127.0.0.1:{}", self.issuer_port).parse().unwrap();
        let (status, body) = call(
            addr,
            "POST",
            "/test/sign",
            "",
            Some(json!({"alg": alg, "claims": claims})),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        body["token"].as_str().unwrap().to_owned()
    }

    /// Claims the provider would put in an ID token for `email` with `groups`.
    fn claims(&self, email: &str, groups: &[&str]) -> Value {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        json!({
            "iss": self.issuer_url, "aud": CLIENT_ID, "sub": format!("sub-{email}"),
            "email": email, "groups": groups, "iat": now, "exp": now + 300,
        })
    }
}

#[sqlx::test(migrations = false)]
async fn bearer_tokens_of_the_provider_are_checked_and_rotated_keys_picked_up(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let mut sso = Sso::start(&opts).await;
    let http = sso.http;
    let admin = format!("authorization: Bearer {ADMIN_TOKEN}\r\n");
    let (status, body) = call(
        http,
        "POST",
        "/api/v1/teams",
        &admin,
        Some(json!({"name": "research"})),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    // Both algorithms, each with the role the groups map to.
    for alg in ["RS256", "ES256"] {
        let token = sso
            .sign(alg, sso.claims("admin@example.com", &["switchyard-admins"]))
            .await;
        let (status, me) = bearer(http, &token, "GET", "/api/v1/whoami", None).await;
        assert_eq!(status, 200, "{alg}: {me}");
        assert_eq!(me["name"], "admin@example.com");
        assert_eq!(me["role"], "admin");
        assert!(me.get("csrf_token").is_none(), "{me}");
    }
    // A write by a person: the audit log names them.
    let token = sso
        .sign(
            "RS256",
            sso.claims("admin@example.com", &["switchyard-admins"]),
        )
        .await;
    let (status, body) = bearer(
        http,
        &token,
        "POST",
        "/api/v1/teams",
        Some(json!({"name": "by-sso"})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (_, audit) = call(http, "GET", "/api/v1/audit?limit=500", &admin, None).await;
    let rows = audit["data"].as_array().unwrap();
    assert!(
        rows.iter()
            .any(|r| r["actor"] == "admin@example.com" && r["resource"] == "team"),
        "{audit}"
    );

    // A viewer reads and cannot write; a team mapping gives a person of that team.
    let viewer = sso
        .sign(
            "RS256",
            sso.claims("viewer@example.com", &["switchyard-viewers"]),
        )
        .await;
    assert_eq!(
        bearer(http, &viewer, "GET", "/api/v1/teams", None).await.0,
        200
    );
    let (status, body) = bearer(
        http,
        &viewer,
        "POST",
        "/api/v1/teams",
        Some(json!({"name": "x"})),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("insufficient_role")),
        "{body}"
    );
    let lead = sso
        .sign(
            "RS256",
            sso.claims("lead@example.com", &["research-admins"]),
        )
        .await;
    let (status, me) = bearer(http, &lead, "GET", "/api/v1/whoami", None).await;
    assert_eq!(
        (status, me["name"].as_str()),
        (200, Some("lead@example.com")),
        "{me}"
    );

    // No mapped group, or a mapped team that does not exist: 403 saying who and why.
    for (groups, says) in [(&["staff"][..], "groups"), (&["ghost-admins"][..], "ghost")] {
        let token = sso
            .sign("RS256", sso.claims("nobody@example.com", groups))
            .await;
        let (status, body) = bearer(http, &token, "GET", "/api/v1/whoami", None).await;
        assert_eq!(status, 403, "{body}");
        assert_eq!(body["error"]["code"], "no_mapped_role", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("nobody@example.com") && message.contains(says),
            "{message}"
        );
    }

    // Tampered, expired, for another audience, from another issuer, unsigned: 401.
    let good = sso.claims("admin@example.com", &["switchyard-admins"]);
    let token = sso.sign("RS256", good.clone()).await;
    let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    let mut forged = good.clone();
    forged["email"] = json!("mallory@example.com");
    parts[1] = base64url(forged.to_string().as_bytes());
    let tampered = parts.join(".");
    let mut expired = good.clone();
    expired["exp"] = json!(good["iat"].as_u64().unwrap() - 120);
    expired["iat"] = json!(good["iat"].as_u64().unwrap() - 600);
    let mut other_audience = good.clone();
    other_audience["aud"] = json!("another-app");
    let mut other_issuer = good.clone();
    other_issuer["iss"] = json!("http://localhost:1/elsewhere");
    let unsigned = format!(
        "{}.{}.",
        base64url(br#"{"alg":"none","typ":"JWT"}"#),
        base64url(good.to_string().as_bytes())
    );
    let refused = [
        ("tampered", tampered),
        ("expired", sso.sign("RS256", expired).await),
        ("wrong audience", sso.sign("ES256", other_audience).await),
        ("wrong issuer", sso.sign("RS256", other_issuer).await),
        ("alg none", unsigned),
    ];
    for (what, token) in refused {
        let (status, body) = bearer(http, &token, "GET", "/api/v1/whoami", None).await;
        assert_eq!(status, 401, "{what}: {body}");
        assert_eq!(body["error"]["code"], "sso_token_refused", "{what}: {body}");
    }

    // The provider restarts with new signing keys: a token by the new key is accepted (the keys
    // are fetched again for its unknown key id), one by the old key no longer is.
    let old = sso
        .sign(
            "RS256",
            sso.claims("admin@example.com", &["switchyard-admins"]),
        )
        .await;
    assert_eq!(
        bearer(http, &old, "GET", "/api/v1/whoami", None).await.0,
        200
    );
    sso.issuer.kill();
    let (issuer, url, _) = start_issuer(&sso.node, http, sso.issuer_port).await;
    assert_eq!(url, sso.issuer_url);
    sso.issuer = issuer;
    let new = sso
        .sign(
            "RS256",
            sso.claims("admin@example.com", &["switchyard-admins"]),
        )
        .await;
    let (status, me) = bearer(http, &new, "GET", "/api/v1/whoami", None).await;
    assert_eq!(status, 200, "a token by the rotated key: {me}");
    let (status, body) = bearer(http, &old, "GET", "/api/v1/whoami", None).await;
    assert_eq!(status, 401, "a token by the retired key: {body}");

    // Admin tokens keep working beside single sign-on.
    assert_eq!(
        call(http, "GET", "/api/v1/whoami", &admin, None).await.0,
        200
    );
}

fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

#[sqlx::test(migrations = false)]
async fn people_sign_in_to_the_console_through_the_provider(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let chromium = std::env::var_os("SWITCHYARD_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(chromium.is_file(), "{} is missing", chromium.display());
    let sso = Sso::start(&opts).await;
    let http = sso.http;
    let mut driver = Process::spawn(
        "console driver",
        Command::new(&sso.node)
            .arg(console_dir().join("sso.mjs"))
            .env("CONSOLE_URL", format!("http://{http}"))
            .env("CHROMIUM", &chromium),
    );
    let deadline = Instant::now() + BROWSER_PATIENCE;
    let team = loop {
        if let Some(team) = driver.find_log(|log| {
            (log["message"] == "sso checks passed")
                .then(|| log["team"].as_str().unwrap().to_owned())
        }) {
            break team;
        }
        assert!(
            driver.is_running(),
            "the console driver failed (its problems are above)"
        );
        assert!(
            Instant::now() < deadline,
            "the console driver took too long"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // What the browser did, seen through the API: the team exists, created by the person.
    let admin = format!("authorization: Bearer {ADMIN_TOKEN}\r\n");
    let (_, teams) = call(http, "GET", "/api/v1/teams?limit=500", &admin, None).await;
    assert!(
        teams["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == team.as_str()),
        "{teams}"
    );
    let (_, audit) = call(http, "GET", "/api/v1/audit?limit=500", &admin, None).await;
    assert!(
        audit["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["actor"] == "admin@example.com (console)" && r["resource"] == "team"),
        "{audit}"
    );
    // Nothing the viewer or the CSRF probes tried was written.
    assert!(
        !teams.to_string().contains(&format!("{team}-")),
        "a refused write was stored: {teams}"
    );
}
