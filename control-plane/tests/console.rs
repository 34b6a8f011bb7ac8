//! The console's static files: served from the binary without the admin token, every answer with
//! the strict Content-Security-Policy, no inline script in the page; the explain alias under
//! `/console` still needs the token. (The console itself is driven in a real browser by
//! `tests/tests/console.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use axum::http::{Method, StatusCode};
use common::test_app;
use sqlx::PgPool;

#[sqlx::test(migrations = "../migrations")]
async fn the_console_is_served_with_a_strict_policy(pool: PgPool) {
    let app = test_app(pool);
    for (path, content_type) in [
        ("/console", "text/html"),
        ("/console/", "text/html"),
        ("/console/assets/app.js", "text/javascript"),
        ("/console/assets/views.js", "text/javascript"),
        ("/console/assets/spend.js", "text/javascript"),
        ("/console/assets/chart.js", "text/javascript"),
        ("/console/assets/cache.js", "text/javascript"),
        ("/console/assets/style.css", "text/css"),
    ] {
        let reply = app.send(Method::GET, path, None, None).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
        let header = |name: &str| {
            reply
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        assert!(header("content-type").starts_with(content_type), "{path}");
        let csp = header("content-security-policy");
        assert!(csp.contains("default-src 'none'"), "{path}: {csp}");
        assert!(csp.contains("script-src 'self'"), "{path}: {csp}");
        assert!(!csp.contains("unsafe"), "{path}: {csp}");
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
    }
    let page = app.send(Method::GET, "/console", None, None).await.text;
    // Scripts only by URL, no inline script or style, nothing from another origin.
    assert!(page.contains(r#"<script type="module" src="/console/assets/app.js"></script>"#));
    assert!(!page.contains("<style"), "inline style");
    assert!(!page.contains("style=\""), "inline style attribute");
    assert!(!page.contains("http://") && !page.contains("https://"));
    for script in [
        "app.js",
        "api.js",
        "dom.js",
        "views.js",
        "spend.js",
        "chart.js",
        "shadows.js",
        "cache.js",
    ] {
        let text = app
            .send(
                Method::GET,
                &format!("/console/assets/{script}"),
                None,
                None,
            )
            .await
            .text;
        assert!(!text.contains("innerHTML"), "{script} uses innerHTML");
        assert!(
            !text.contains("localStorage.setItem"),
            "{script} persists data"
        );
    }

    let missing = app
        .send(Method::GET, "/console/assets/nope.js", None, None)
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let alias = app
        .send(Method::GET, "/console/routes/explain?model=x", None, None)
        .await;
    assert_eq!(alias.status, StatusCode::UNAUTHORIZED);
}
