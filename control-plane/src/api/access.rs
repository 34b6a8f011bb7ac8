//! Who is calling the admin API, and what they may do.
//!
//! A caller presents a bearer token: the bootstrap token from `SWITCHYARD_ADMIN_TOKEN` (always
//! the `admin` role, named `bootstrap`) or a named admin token created through
//! `/api/v1/admin-tokens` (its SHA-256 is looked up in `admin_tokens` on every request, so a
//! revoked or expired token is refused on its next call). Roles are ordered:
//! `viewer` < `operator` < `admin`.
//!
//! Every admin route is classified in one table, [`ROUTE_ROLES`], by method and route template.
//! The middleware refuses a caller whose role is below the route's with a 403 before the handler
//! (or its body parsing) runs. A route missing from the table needs `admin` (fail closed), and a
//! test checks that the table and the router list the same routes.

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::db::ts;
use crate::error::ApiError;
pub use crate::role::Role;
use crate::sso;
use crate::state::AppState;

/// The name the bootstrap token (`SWITCHYARD_ADMIN_TOKEN`) goes by in the audit and access logs.
pub const BOOTSTRAP_NAME: &str = "bootstrap";

use Role::{Admin, Operator, Viewer};

/// Every route of the admin API (method, route template) and the least role that may call it.
/// `HEAD` is classified as `GET`. Reads are `viewer`; what only computes an answer (dry run,
/// trial call, configuration plan) is `operator`; everything that changes stored state, and
/// everything about admin tokens, is `admin`.
pub const ROUTE_ROLES: &[(&str, &str, Role)] = &[
    ("GET", "/api/v1/whoami", Viewer),
    ("GET", "/api/v1/openapi.json", Viewer),
    ("GET", "/api/v1/admin-tokens", Admin),
    ("POST", "/api/v1/admin-tokens", Admin),
    ("GET", "/api/v1/admin-tokens/{id}", Admin),
    ("DELETE", "/api/v1/admin-tokens/{id}", Admin),
    ("GET", "/api/v1/channels", Viewer),
    ("POST", "/api/v1/channels", Admin),
    ("GET", "/api/v1/channels/{id}", Viewer),
    ("PATCH", "/api/v1/channels/{id}", Admin),
    ("DELETE", "/api/v1/channels/{id}", Admin),
    ("GET", "/api/v1/channels/{id}/events", Viewer),
    ("GET", "/api/v1/channels/{id}/credentials", Viewer),
    ("POST", "/api/v1/channels/{id}/credentials", Admin),
    ("GET", "/api/v1/credentials/{id}", Viewer),
    ("PATCH", "/api/v1/credentials/{id}", Admin),
    ("DELETE", "/api/v1/credentials/{id}", Admin),
    ("GET", "/api/v1/routes", Viewer),
    ("POST", "/api/v1/routes", Admin),
    ("GET", "/api/v1/routes/{id}", Viewer),
    ("PATCH", "/api/v1/routes/{id}", Admin),
    ("DELETE", "/api/v1/routes/{id}", Admin),
    ("GET", "/api/v1/routes/{id}/members", Viewer),
    ("POST", "/api/v1/routes/{id}/members", Admin),
    ("GET", "/api/v1/routes/explain", Viewer),
    ("GET", "/console/routes/explain", Viewer),
    ("GET", "/api/v1/members/{id}", Viewer),
    ("PATCH", "/api/v1/members/{id}", Admin),
    ("DELETE", "/api/v1/members/{id}", Admin),
    ("POST", "/api/v1/members/{id}/trial", Operator),
    ("GET", "/api/v1/tokens", Viewer),
    ("POST", "/api/v1/tokens", Admin),
    ("GET", "/api/v1/tokens/{id}", Viewer),
    ("PATCH", "/api/v1/tokens/{id}", Admin),
    ("DELETE", "/api/v1/tokens/{id}", Admin),
    ("GET", "/api/v1/teams", Viewer),
    ("POST", "/api/v1/teams", Admin),
    ("GET", "/api/v1/teams/{id}", Viewer),
    ("PATCH", "/api/v1/teams/{id}", Admin),
    ("DELETE", "/api/v1/teams/{id}", Admin),
    ("GET", "/api/v1/presets", Viewer),
    ("GET", "/api/v1/prices", Viewer),
    ("POST", "/api/v1/prices", Admin),
    ("GET", "/api/v1/prices/{id}", Viewer),
    ("PATCH", "/api/v1/prices/{id}", Admin),
    ("DELETE", "/api/v1/prices/{id}", Admin),
    ("GET", "/api/v1/shadows", Viewer),
    ("POST", "/api/v1/shadows", Admin),
    ("GET", "/api/v1/shadows/{id}", Viewer),
    ("PATCH", "/api/v1/shadows/{id}", Admin),
    ("DELETE", "/api/v1/shadows/{id}", Admin),
    ("GET", "/api/v1/shadows/{id}/report", Viewer),
    ("GET", "/api/v1/cache_rules", Viewer),
    ("POST", "/api/v1/cache_rules", Admin),
    ("GET", "/api/v1/cache_rules/{id}", Viewer),
    ("PATCH", "/api/v1/cache_rules/{id}", Admin),
    ("DELETE", "/api/v1/cache_rules/{id}", Admin),
    ("GET", "/api/v1/cache_rules/{id}/trial", Viewer),
    ("GET", "/api/v1/guardrails", Viewer),
    ("POST", "/api/v1/guardrails", Admin),
    ("GET", "/api/v1/guardrails/{id}", Viewer),
    ("PATCH", "/api/v1/guardrails/{id}", Admin),
    ("DELETE", "/api/v1/guardrails/{id}", Admin),
    ("GET", "/api/v1/guardrails/{id}/report", Viewer),
    ("GET", "/api/v1/webhooks", Viewer),
    ("POST", "/api/v1/webhooks", Admin),
    ("GET", "/api/v1/webhooks/{id}", Viewer),
    ("PATCH", "/api/v1/webhooks/{id}", Admin),
    ("DELETE", "/api/v1/webhooks/{id}", Admin),
    ("GET", "/api/v1/webhooks/{id}/deliveries", Viewer),
    ("GET", "/api/v1/limits", Viewer),
    ("POST", "/api/v1/limits", Admin),
    ("GET", "/api/v1/limits/{id}", Viewer),
    ("PATCH", "/api/v1/limits/{id}", Admin),
    ("DELETE", "/api/v1/limits/{id}", Admin),
    ("GET", "/api/v1/budgets", Viewer),
    ("GET", "/api/v1/settings", Viewer),
    ("PUT", "/api/v1/settings", Admin),
    ("PATCH", "/api/v1/settings", Admin),
    ("POST", "/api/v1/dry-run", Operator),
    ("GET", "/api/v1/config", Viewer),
    ("POST", "/api/v1/config/plan", Operator),
    ("POST", "/api/v1/config/apply", Admin),
    ("GET", "/api/v1/state", Viewer),
    ("GET", "/api/v1/audit", Viewer),
    ("GET", "/api/v1/usage", Viewer),
    ("GET", "/api/v1/requests", Viewer),
];

/// What a request to `route` with `method` needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteAccess {
    /// The route takes this method and needs at least this role.
    Needs(Role),
    /// The route exists but not with this method: the router answers 405, nothing runs.
    OtherMethod,
}

/// The classification of (`method`, `route`) in [`ROUTE_ROLES`]; `admin` for a route the table
/// does not list, so a route added without a classification is never open to less.
pub fn route_access(method: &Method, route: &str) -> RouteAccess {
    let method = if method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    let mut known_route = false;
    for (m, r, role) in ROUTE_ROLES {
        if *r == route {
            if *m == method {
                return RouteAccess::Needs(*role);
            }
            known_route = true;
        }
    }
    if known_route {
        RouteAccess::OtherMethod
    } else {
        RouteAccess::Needs(Admin)
    }
}

/// The authenticated caller of one request.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The admin token's name, `bootstrap`, or the email (else the subject) of a person signed
    /// in through single sign-on.
    pub name: String,
    pub role: Role,
    /// The admin token's id; `None` for the bootstrap token and for people.
    pub token_id: Option<i64>,
    /// When the token (or the console session) stops working (RFC 3339), if it expires.
    pub expires_at: Option<String>,
    /// The one team this caller administers, if it is limited to one; `None`: the whole fleet.
    pub team: Option<i64>,
}

/// The caller of a request, as the middleware put it in the request's extensions: who they are,
/// and the actor the audit and access logs record (the token's name, followed by the optional
/// `x-switchyard-actor` header in parentheses: `bootstrap (alice@console)`).
#[derive(Debug, Clone)]
pub struct Caller {
    pub identity: Identity,
    pub actor: String,
}

fn actor_label(name: &str, headers: &HeaderMap) -> String {
    let note = headers
        .get("x-switchyard-actor")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(|v| v.chars().take(128).collect::<String>());
    match note {
        Some(note) if note != name => format!("{name} ({note})"),
        _ => name.to_owned(),
    }
}

/// Authenticates the caller (see [`authenticate`]), then checks their role against the route's.
/// No credential, or an unknown, revoked or expired one, is a 401; a role below the route's is a
/// 403 naming both.
pub async fn authorize(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let identity = match authenticate(&state, &mut request).await {
        Ok(identity) => identity,
        Err(error) => return error.into_response(),
    };
    let actor = actor_label(&identity.name, request.headers());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(String::new, |p| p.as_str().to_owned());
    let mut response = match route_access(request.method(), &route) {
        RouteAccess::Needs(needed) if identity.role < needed => ApiError::Forbidden {
            message: format!(
                "{} {route} needs the {} role; {} has the {} role",
                crate::metrics::method_label(request.method()),
                needed.as_str(),
                caller_kind(&identity),
                identity.role.as_str()
            ),
        }
        .into_response(),
        _ => {
            request.extensions_mut().insert(Caller {
                identity,
                actor: actor.clone(),
            });
            next.run(request).await
        }
    };
    response
        .extensions_mut()
        .insert(crate::metrics::LoggedActor(actor));
    response
}

/// How a 403 names the caller: `the admin token "oncall"`, or a person by name.
fn caller_kind(identity: &Identity) -> String {
    if identity.token_id.is_some() || identity.name == BOOTSTRAP_NAME {
        format!("the admin token {:?}", identity.name)
    } else {
        format!("{:?} (single sign-on)", identity.name)
    }
}

/// The session's CSRF token, in the extensions of a request made with the console's session
/// cookie (`/api/v1/whoami` hands it to the console).
#[derive(Debug, Clone)]
pub struct SessionCsrf(pub String);

/// Who is calling: a bearer credential (the bootstrap token, an admin token, or, with single
/// sign-on on, a JWT of the identity provider), else the console's session cookie. A request
/// made with the cookie that is not a read must carry the session's CSRF token in
/// `x-switchyard-csrf` (another site can make a browser send the cookie, never the header).
async fn authenticate(state: &AppState, request: &mut Request) -> Result<Identity, ApiError> {
    let headers = request.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|v| !v.is_empty());
    let now = sso::unix_now();
    if let Some(presented) = bearer {
        return match &state.sso {
            Some(sso) if sso::looks_like_jwt(presented) => {
                let (person, exp) = sso.bearer(&state.pool, presented, now).await?;
                Ok(person_identity(person, Some(exp.saturating_mul(1000))))
            }
            _ => identify(state, presented)
                .await?
                .ok_or(ApiError::Unauthorized),
        };
    }
    let (Some(_), Some(secret)) = (&state.sso, sso::cookie(headers, sso::SESSION_COOKIE)) else {
        return Err(ApiError::Unauthorized);
    };
    let session = sso::store::find(&state.pool, secret)
        .await?
        .ok_or(ApiError::Unauthorized)?;
    let safe = matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    let sent = headers.get(sso::CSRF_HEADER).and_then(|v| v.to_str().ok());
    if !safe && !sso::store::csrf_matches(secret, sent) {
        return Err(ApiError::CsrfRefused);
    }
    let csrf = sso::store::csrf_token(secret);
    request.extensions_mut().insert(SessionCsrf(csrf));
    let mut identity = person_identity(session.person, None);
    identity.expires_at = Some(session.expires_at);
    Ok(identity)
}

/// A person the identity provider vouched for, as a caller (`expires_ms`: the token's expiry).
fn person_identity(person: sso::person::Person, expires_ms: Option<i64>) -> Identity {
    Identity {
        name: person.name,
        role: person.role,
        token_id: None,
        expires_at: expires_ms
            .and_then(|ms| u64::try_from(ms).ok())
            .map(switchyard_engine::limit::format_rfc3339),
        team: person.team,
    }
}

/// The identity `presented` authenticates: the bootstrap token (compared as SHA-256 digests, in
/// constant time), or a live admin token found by its hash. `None`: no such token.
async fn identify(state: &AppState, presented: &str) -> Result<Option<Identity>, ApiError> {
    let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
    if same_digest(&digest, &state.admin_token_digest) {
        return Ok(Some(Identity {
            name: BOOTSTRAP_NAME.to_owned(),
            role: Admin,
            token_id: None,
            expires_at: None,
            team: None,
        }));
    }
    let hash = switchyard_proto::hex(&digest);
    let sql = format!(
        "SELECT id, name, role, {} AS expires_at, \
         (last_used_at IS NULL OR last_used_at < now() - interval '60 seconds') AS stale \
         FROM admin_tokens \
         WHERE hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())",
        ts("expires_at")
    );
    let row: Option<(i64, String, String, Option<String>, bool)> = sqlx::query_as(&sql)
        .bind(&hash)
        .fetch_optional(&state.pool)
        .await?;
    let Some((id, name, role, expires_at, stale)) = row else {
        return Ok(None);
    };
    let role = Role::parse(&role)
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("admin token {id} has role {role:?}")))?;
    if stale {
        // Recorded at most once a minute per token, so reads stay reads.
        if let Err(error) =
            sqlx::query("UPDATE admin_tokens SET last_used_at = now() WHERE id = $1")
                .bind(id)
                .execute(&state.pool)
                .await
        {
            tracing::warn!(error = %error, token_id = id, "could not record an admin token's use");
        }
    }
    Ok(Some(Identity {
        name,
        role,
        token_id: Some(id),
        expires_at,
        team: None,
    }))
}

/// Whether two SHA-256 digests are equal, looking at every byte whatever the first difference
/// (constant time: how long it takes says nothing about how much of a guess was right).
fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

/// The authenticated caller; only handlers behind [`authorize`] use it.
impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Caller, ApiError> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or(ApiError::Unauthorized)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered_and_round_trip() {
        assert!(Viewer < Operator && Operator < Admin);
        for role in Role::ALL {
            assert_eq!(Role::parse(role.as_str()), Some(role));
        }
        assert_eq!(Role::parse("root"), None);
    }

    #[test]
    fn unlisted_routes_need_admin_and_other_methods_pass_to_the_router() {
        assert_eq!(
            route_access(&Method::GET, "/api/v1/channels"),
            RouteAccess::Needs(Viewer)
        );
        assert_eq!(
            route_access(&Method::HEAD, "/api/v1/channels"),
            RouteAccess::Needs(Viewer)
        );
        assert_eq!(
            route_access(&Method::DELETE, "/api/v1/channels"),
            RouteAccess::OtherMethod
        );
        assert_eq!(
            route_access(&Method::GET, "/api/v1/not-classified"),
            RouteAccess::Needs(Admin)
        );
    }

    #[test]
    fn every_write_needs_more_than_viewer() {
        for (method, route, role) in ROUTE_ROLES {
            if *method != "GET" {
                assert!(*role > Viewer, "{method} {route} is open to viewers");
            }
        }
    }

    #[test]
    fn digests_are_the_same_only_when_every_byte_is() {
        let digest: [u8; 32] = Sha256::digest(b"bootstrap-token").into();
        assert!(same_digest(&digest, &digest));
        assert!(!same_digest(&digest, &[0; 32]));
        for at in 0..32 {
            for flip in [0x01, 0x80, 0xff] {
                let mut other = digest;
                other[at] ^= flip;
                assert!(!same_digest(&digest, &other), "byte {at} ^ {flip:#x}");
            }
        }
        // Two differences that cancel out when combined by anything but an OR.
        let mut other = digest;
        other[0] ^= 0x01;
        other[1] ^= 0x01;
        assert!(!same_digest(&digest, &other));
        // All bits set on both sides: equal, and not mistaken for a difference.
        assert!(same_digest(&[0xff; 32], &[0xff; 32]));
    }

    #[test]
    fn the_actor_is_the_token_name_with_the_header_as_a_note() {
        let mut headers = HeaderMap::new();
        assert_eq!(actor_label("oncall", &headers), "oncall");
        headers.insert("x-switchyard-actor", "console".parse().unwrap());
        assert_eq!(actor_label("oncall", &headers), "oncall (console)");
        assert_eq!(actor_label("console", &headers), "console");
    }
}
