//! The web console at `/console`: a few static files compiled into the binary (`include_str!`),
//! served without authentication (they hold no data; every call they make is an admin API call
//! with the token the operator signs in with, kept in the tab's `sessionStorage`, or with the
//! single sign-on session's `HttpOnly` cookie and its CSRF header).
//!
//! No build step: plain ES modules and one stylesheet in `control-plane/console/`. Every answer
//! carries a strict Content-Security-Policy (scripts, styles and fetches from this origin only;
//! no inline script or style, no frames, no plugins), so the console works offline and an
//! injected string can never run as code.

use axum::extract::Path;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::state::AppState;

/// The policy every console answer carries.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// (file name, content type, content).
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/app.js"),
    ),
    (
        "api.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/api.js"),
    ),
    (
        "views.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/views.js"),
    ),
    (
        "spend.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/spend.js"),
    ),
    (
        "shadows.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/shadows.js"),
    ),
    (
        "cache.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/cache.js"),
    ),
    (
        "guardrails.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/guardrails.js"),
    ),
    (
        "requests.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/requests.js"),
    ),
    (
        "webhooks.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/webhooks.js"),
    ),
    (
        "chart.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/chart.js"),
    ),
    (
        "dom.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/dom.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../../console/style.css"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("../../console/favicon.svg"),
    ),
];

const INDEX: &str = include_str!("../../console/index.html");

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console", get(index))
        .route("/console/", get(index))
        .route("/console/assets/{name}", get(asset))
}

fn secured(content_type: &'static str, body: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        HeaderName::from_static("x-frame-options"),
        HeaderValue::from_static("DENY"),
    );
    // Assets change with the binary; a restart must not leave a stale console in a browser.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

async fn index() -> Response {
    secured("text/html; charset=utf-8", INDEX)
}

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(file, _, _)| *file == name) {
        Some((_, content_type, body)) => secured(content_type, body),
        None => crate::error::ApiError::UnknownEndpoint {
            path: crate::error::bounded(&format!("/console/assets/{name}"), 256),
        }
        .into_response(),
    }
}
