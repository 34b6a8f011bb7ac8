//! The console's single sign-on routes, open without a credential (they are how one is made):
//!
//! - `GET /console/sso/status`: whether single sign-on is on (the console shows its button).
//! - `GET /console/sso/login`: redirects to the identity provider, the sign-in's state, nonce and
//!   PKCE verifier in a signed cookie sent back to the callback only.
//! - `GET /console/sso/callback`: finishes the sign-in, starts a session and sets its cookie
//!   (`HttpOnly`, `Secure`, `SameSite=Strict`), then redirects to the console. A person none of
//!   whose groups has a role gets a 403 saying so, and no session.
//! - `POST /console/sso/logout`: ends the session (with its CSRF token, as every cookie write).

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::error::ApiError;
use crate::sso::login::{LOGIN_COOKIE, LOGIN_TTL_SECS};
use crate::sso::{self, store, Callback, Sso, CSRF_HEADER, SESSION_COOKIE};
use crate::state::AppState;

const LOGIN_PATH: &str = "/console/sso/callback";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/sso/status", get(status))
        .route("/console/sso/login", get(login))
        .route(LOGIN_PATH, get(callback))
        .route("/console/sso/logout", post(logout))
}

fn configured(state: &AppState) -> Result<&Sso, ApiError> {
    state
        .sso
        .as_deref()
        .ok_or_else(|| ApiError::UnknownEndpoint {
            path: "/console/sso (single sign-on is off: SWITCHYARD_SSO_ISSUER is not set)".into(),
        })
}

/// A `Set-Cookie` value; `max_age` 0 removes the cookie.
fn set_cookie(
    name: &str,
    value: &str,
    path: &str,
    max_age: i64,
    same_site: &str,
) -> Result<HeaderValue, ApiError> {
    let mut value = HeaderValue::from_str(&format!(
        "{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; Secure; SameSite={same_site}"
    ))
    .map_err(|e| ApiError::Internal(anyhow::anyhow!("cookie header: {e}")))?;
    value.set_sensitive(true);
    Ok(value)
}

/// A redirect that no cache keeps, with these cookies set.
fn redirect(location: &str, cookies: Vec<HeaderValue>) -> Result<Response, ApiError> {
    let location = HeaderValue::from_str(location)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("redirect location: {e}")))?;
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    headers.insert(header::LOCATION, location);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    for cookie in cookies {
        headers.append(header::SET_COOKIE, cookie);
    }
    Ok(response)
}

async fn status(State(state): State<AppState>) -> Response {
    Json(json!({"enabled": state.sso.is_some()})).into_response()
}

async fn login(State(state): State<AppState>) -> Result<Response, ApiError> {
    let sso = configured(&state)?;
    let (url, pending) = sso.begin(sso::unix_now()).await?;
    let cookie = set_cookie(LOGIN_COOKIE, &pending, LOGIN_PATH, LOGIN_TTL_SECS, "Lax")?;
    redirect(&url, vec![cookie])
}

async fn callback(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<Callback>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let sso = configured(&state)?;
    let Query(query) = query.map_err(|e| ApiError::bad_request(None, e.body_text()))?;
    let login_cookie = sso::cookie(&headers, LOGIN_COOKIE);
    let person = sso
        .finish(&state.pool, &query, login_cookie, sso::unix_now())
        .await;
    let person = match person {
        Ok(person) => person,
        Err(error) => {
            tracing::warn!(error = %error, "a single sign-on was refused");
            return Err(error);
        }
    };
    let ttl = i64::try_from(sso.settings.session_ttl.as_secs()).unwrap_or(i64::MAX);
    let secret = store::create(&state.pool, &person, ttl).await?;
    tracing::info!(name = %person.name, role = person.role.as_str(), team = ?person.team, "signed in through single sign-on");
    redirect(
        "/console/",
        vec![
            set_cookie(SESSION_COOKIE, &secret, "/", ttl, "Strict")?,
            set_cookie(LOGIN_COOKIE, "", LOGIN_PATH, 0, "Lax")?,
        ],
    )
}

async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    configured(&state)?;
    if let Some(secret) = sso::cookie(&headers, SESSION_COOKIE) {
        let sent = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
        if !store::csrf_matches(secret, sent) {
            return Err(ApiError::CsrfRefused);
        }
        store::end(&state.pool, secret).await?;
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        set_cookie(SESSION_COOKIE, "", "/", 0, "Strict")?,
    );
    Ok(response)
}
