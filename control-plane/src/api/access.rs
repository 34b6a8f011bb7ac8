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
//!
//! An admin token may be limited to one team (a *team admin*, whatever its role). A second
//! table, [`TEAM_ROUTES`], says which routes such a caller may call at all and how what it
//! names is checked to be its team's; a route missing from it is for fleet admins only (403
//! `outside_team`, fail closed). On a route whose `{id}` names a resource, the middleware
//! answers 404 for a resource of another team (or of no team), exactly as for one that does
//! not exist, before the handler runs; lists and reports are filtered to the team by their
//! handlers, and the resource layer checks again, inside the write's transaction, that the row
//! it locked is the team's and that the write keeps it the team's (403 otherwise).

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

/// A resource a team admin may administer, and how a row of it belongs to a team.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owned {
    /// The team itself: its own row only.
    Team,
    /// A downstream token: its `team_id` is the team.
    Token,
    /// A limit (and the budget a spend limit is): its scope is the team, or a token of the team.
    Limit,
    /// A cache rule limited to the team (`team_id`).
    CacheRule,
}

impl Owned {
    /// The table its rows live in (a fixed set: safe to put in SQL text).
    pub fn table(self) -> &'static str {
        match self {
            Owned::Team => "teams",
            Owned::Token => "tokens",
            Owned::Limit => "limits",
            Owned::CacheRule => "cache_rules",
        }
    }

    /// What a 404 calls it (the resource's own name for it).
    pub fn noun(self) -> &'static str {
        match self {
            Owned::Team => "team",
            Owned::Token => "token",
            Owned::Limit => "limit",
            Owned::CacheRule => "cache rule",
        }
    }

    /// The SQL condition, on a row of [`Owned::table`] (unqualified columns), that holds when the
    /// row belongs to the team whose id is bound as `$n`.
    pub fn belongs(self, n: usize) -> String {
        match self {
            Owned::Team => format!("id = ${n}"),
            Owned::Token | Owned::CacheRule => format!("team_id = ${n}"),
            Owned::Limit => format!(
                "((scope = 'team' AND scope_id = ${n}) OR (scope = 'token' AND scope_id IN \
                 (SELECT id FROM tokens WHERE team_id = ${n})))"
            ),
        }
    }
}

/// What a caller limited to one team may do on a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TeamAccess {
    /// Nothing of any team is read or written (who am I, the API's own document).
    Open,
    /// The route's `{id}` must name a resource of the team (else 404); its collection lists
    /// only the team's; what a write stores must stay the team's (else 403).
    Own(Owned),
    /// A report read only for the team: its handler forces the team's filter.
    Filtered,
}

use TeamAccess::{Filtered, Open, Own};

/// The routes a caller limited to one team may call, and how ownership is checked on each. The
/// role check of [`ROUTE_ROLES`] still applies (a team viewer reads, a team admin also writes).
/// Every route not listed here is for fleet admins only: channels, credentials, routes,
/// members, prices, presets, shadow rules, guardrails, webhooks, settings, explain, dry runs,
/// configuration, the shared state and admin tokens; creating, changing or deleting a team too.
pub const TEAM_ROUTES: &[(&str, &str, TeamAccess)] = &[
    ("GET", "/api/v1/whoami", Open),
    ("GET", "/api/v1/openapi.json", Open),
    ("GET", "/api/v1/tokens", Own(Owned::Token)),
    ("POST", "/api/v1/tokens", Own(Owned::Token)),
    ("GET", "/api/v1/tokens/{id}", Own(Owned::Token)),
    ("PATCH", "/api/v1/tokens/{id}", Own(Owned::Token)),
    ("DELETE", "/api/v1/tokens/{id}", Own(Owned::Token)),
    ("GET", "/api/v1/teams", Own(Owned::Team)),
    ("GET", "/api/v1/teams/{id}", Own(Owned::Team)),
    ("GET", "/api/v1/limits", Own(Owned::Limit)),
    ("POST", "/api/v1/limits", Own(Owned::Limit)),
    ("GET", "/api/v1/limits/{id}", Own(Owned::Limit)),
    ("PATCH", "/api/v1/limits/{id}", Own(Owned::Limit)),
    ("DELETE", "/api/v1/limits/{id}", Own(Owned::Limit)),
    ("GET", "/api/v1/budgets", Filtered),
    ("GET", "/api/v1/cache_rules", Own(Owned::CacheRule)),
    ("POST", "/api/v1/cache_rules", Own(Owned::CacheRule)),
    ("GET", "/api/v1/cache_rules/{id}", Own(Owned::CacheRule)),
    ("PATCH", "/api/v1/cache_rules/{id}", Own(Owned::CacheRule)),
    ("DELETE", "/api/v1/cache_rules/{id}", Own(Owned::CacheRule)),
    (
        "GET",
        "/api/v1/cache_rules/{id}/trial",
        Own(Owned::CacheRule),
    ),
    ("GET", "/api/v1/usage", Filtered),
    ("GET", "/api/v1/requests", Filtered),
    ("GET", "/api/v1/audit", Filtered),
];

/// What a caller limited to one team may do with (`method`, `route`); `None`: nothing, the route
/// is for fleet admins only (a route the table does not list included).
pub fn team_access(method: &Method, route: &str) -> Option<TeamAccess> {
    let method = if method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    TEAM_ROUTES
        .iter()
        .find(|(m, r, _)| *m == method && *r == route)
        .map(|(_, _, access)| *access)
}

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

/// Authenticates the caller (see [`authenticate`]), then checks their role against the route's
/// and, for a caller limited to one team, the route against [`TEAM_ROUTES`]. No credential, or an
/// unknown, revoked or expired one, is a 401; a role below the route's is a 403 naming both; a
/// fleet route called by a team admin is a 403 `outside_team`, and another team's `{id}` a 404.
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
    let (mut parts, body) = request.into_parts();
    let mut response = match admit(&state, &identity, &mut parts).await {
        Err(error) => error.into_response(),
        Ok(()) => {
            parts.extensions.insert(Caller {
                identity,
                actor: actor.clone(),
            });
            next.run(Request::from_parts(parts, body)).await
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

/// Whether `identity` may call the request's route: its role, then its team's reach.
async fn admit(state: &AppState, identity: &Identity, parts: &mut Parts) -> Result<(), ApiError> {
    let route = parts
        .extensions
        .get::<MatchedPath>()
        .map_or_else(String::new, |p| p.as_str().to_owned());
    let needed = match route_access(&parts.method, &route) {
        // The router answers 405; nothing runs.
        RouteAccess::OtherMethod => return Ok(()),
        RouteAccess::Needs(needed) => needed,
    };
    let method = crate::metrics::method_label(&parts.method);
    if identity.role < needed {
        return Err(ApiError::Forbidden {
            message: format!(
                "{method} {route} needs the {} role; {} has the {} role",
                needed.as_str(),
                caller_kind(identity),
                identity.role.as_str()
            ),
        });
    }
    let Some(team) = identity.team else {
        return Ok(());
    };
    match team_access(&parts.method, &route) {
        None => Err(ApiError::OutsideTeam {
            message: format!(
                "{method} {route} is for fleet admins; {} administers team {team} only",
                caller_kind(identity)
            ),
        }),
        Some(Own(owned)) => {
            let id = axum::extract::RawPathParams::from_request_parts(parts, state)
                .await
                .ok()
                .and_then(|params| {
                    params
                        .iter()
                        .find(|(name, _)| *name == "id")
                        .map(|(_, value)| value.to_owned())
                });
            // An id that is not a number is the handler's 400; nothing is read with it.
            match id.and_then(|id| id.parse::<i64>().ok()) {
                Some(id) => owned_or_missing(&state.pool, owned, id, team).await,
                None => Ok(()),
            }
        }
        Some(Open | Filtered) => Ok(()),
    }
}

/// `Ok` when row `id` of `owned` belongs to `team`; otherwise the 404 a missing row gets (a
/// team admin cannot tell another team's resource from one that does not exist).
pub async fn owned_or_missing(
    executor: impl sqlx::PgExecutor<'_>,
    owned: Owned,
    id: i64,
    team: i64,
) -> Result<(), ApiError> {
    let sql = format!(
        "SELECT EXISTS (SELECT 1 FROM {} WHERE id = $1 AND {})",
        owned.table(),
        owned.belongs(2)
    );
    let belongs: bool = sqlx::query_scalar(&sql)
        .bind(id)
        .bind(team)
        .fetch_one(executor)
        .await?;
    if belongs {
        Ok(())
    } else {
        Err(ApiError::not_found(owned.noun(), id))
    }
}

/// `Ok` when row `id` of `owned`, which a write of a team admin of `team` names in its body (a
/// limit's scope, a token's team), belongs to `team`; otherwise a 403 naming `field`, whether or
/// not the row exists.
pub async fn owned_target(
    executor: impl sqlx::PgExecutor<'_>,
    owned: Owned,
    (field, id): (&str, i64),
    team: i64,
) -> Result<(), ApiError> {
    if owned_or_missing(executor, owned, id, team).await.is_ok() {
        return Ok(());
    }
    Err(ApiError::OutsideTeam {
        message: format!(
            "{field}: {} {id} is not of team {team}, the only team this admin token administers",
            owned.noun()
        ),
    })
}

/// A live admin token as [`identify`] reads it; `stale`: its use was last recorded over a minute
/// ago.
#[derive(sqlx::FromRow)]
struct LiveToken {
    id: i64,
    name: String,
    role: String,
    expires_at: Option<String>,
    team_id: Option<i64>,
    stale: bool,
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
        "SELECT id, name, role, {} AS expires_at, team_id, \
         (last_used_at IS NULL OR last_used_at < now() - interval '60 seconds') AS stale \
         FROM admin_tokens \
         WHERE hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())",
        ts("expires_at")
    );
    let row: Option<LiveToken> = sqlx::query_as(&sql)
        .bind(&hash)
        .fetch_optional(&state.pool)
        .await?;
    let Some(LiveToken {
        id,
        name,
        role,
        expires_at,
        team_id: team,
        stale,
    }) = row
    else {
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
        team,
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
