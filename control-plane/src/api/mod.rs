//! The admin REST API (docs/src/reference/control-plane-api.md): one router built from the
//! handlers' own OpenAPI annotations, so `/api/v1/openapi.json` always lists exactly the routes
//! that exist.
//!
//! Each resource module (routes, members, channels, credentials, teams, tokens, limits, prices,
//! shadows, admin tokens) has its own `list`, `get_one`, `patch` and `delete` handlers, and
//! they look alike on purpose: each is a one-line call, into the shared row code (`rows.rs`:
//! `fetch_row`, `list_views`, `lock_row`, `commit_view`, `delete_row`) or into the module's own
//! `patch_in` / `delete_in` (which applying a configuration file calls too), and what differs
//! between them is their OpenAPI annotation (path, operation id, body and error types) and
//! their types, which one generic handler could not carry. A duplicate finder lists these
//! pairs; they stay.

pub mod access;
mod admin_tokens;
pub mod amount;
mod budgets;
mod channels;
pub mod config_file;
pub mod console;
mod credentials;
mod dry_run;
mod explain;
pub mod extract;
mod limits;
mod members;
pub mod openapi;
mod ops;
mod presets;
mod prices;
mod routes;
mod rows;
pub mod schema;
pub(crate) mod settings;
mod shadows;
mod teams;
mod tokens;
mod trial;
pub mod usage;

use std::sync::Arc;

pub use tokens::token_hash;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoParams, Modify, OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::live::LiveState;
use crate::metrics::Metrics;
use crate::publisher::Publisher;
use crate::recovery::Recovery;

/// Everything a handler needs. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub(crate) admin_token_digest: [u8; 32],
    pub publisher: Arc<Publisher>,
    pub metrics: Arc<Metrics>,
    /// The fleet's shared state (`REDIS_URL`), for explain and `/api/v1/state`.
    pub live: Option<LiveState>,
    /// The recovery job, for `/metrics`.
    pub recovery: Option<Arc<Recovery>>,
    /// The HTTP server's connection counters, for `/metrics`.
    pub connections: Option<switchyard_server::Stats>,
    /// The gRPC port's connection counters, for `/metrics`.
    pub grpc_connections: Option<switchyard_server::Stats>,
    /// Fires on SIGTERM: `/readyz` answers 503 from then on.
    pub draining: tokio_util::sync::CancellationToken,
    /// The proxies whose snapshot streams this replica serves, for `/api/v1/state`.
    pub proxies: Arc<crate::proxies::ProxyRegistry>,
    /// No fleet token is configured: proxies receive snapshots without secrets, so explain
    /// selects from that same snapshot.
    pub proxies_without_secrets: bool,
    /// How trial calls connect to upstreams.
    pub upstream: switchyard_upstream::ClientOptions,
}

impl AppState {
    pub fn new(
        pool: PgPool,
        admin_token: &str,
        publisher: Arc<Publisher>,
        metrics: Arc<Metrics>,
    ) -> AppState {
        AppState {
            pool,
            admin_token_digest: Sha256::digest(admin_token.as_bytes()).into(),
            publisher,
            metrics,
            live: None,
            recovery: None,
            connections: None,
            grpc_connections: None,
            draining: tokio_util::sync::CancellationToken::new(),
            proxies: Arc::default(),
            proxies_without_secrets: false,
            upstream: switchyard_upstream::ClientOptions::new(std::time::Duration::from_secs(5)),
        }
    }

    /// How trial calls connect to upstreams (extra trusted roots, HTTP/2).
    pub fn with_upstream(mut self, upstream: switchyard_upstream::ClientOptions) -> AppState {
        self.upstream = upstream;
        self
    }

    /// No fleet token is configured: explain selects from the snapshot the proxies then receive
    /// (without secrets), so it shows the channels they cannot call.
    pub fn with_proxies_without_secrets(mut self, without: bool) -> AppState {
        self.proxies_without_secrets = without;
        self
    }

    /// The gRPC server's registry of connected proxies, shown in `/api/v1/state`.
    pub fn with_proxies(mut self, proxies: Arc<crate::proxies::ProxyRegistry>) -> AppState {
        self.proxies = proxies;
        self
    }

    /// Explain and `/api/v1/state` read this shared state.
    pub fn with_live(mut self, live: LiveState) -> AppState {
        self.live = Some(live);
        self
    }

    /// The recovery job, rendered in `/metrics`. It reads what to probe from this app's
    /// publisher, which is handed to it here.
    pub fn with_recovery(mut self, recovery: Arc<Recovery>) -> AppState {
        recovery.read_snapshots_from(Arc::clone(&self.publisher));
        self.recovery = Some(recovery);
        self
    }

    pub fn with_draining(mut self, draining: tokio_util::sync::CancellationToken) -> AppState {
        self.draining = draining;
        self
    }

    /// The HTTP server's connection counters, rendered in `/metrics`.
    pub fn with_connections(mut self, connections: switchyard_server::Stats) -> AppState {
        self.connections = Some(connections);
        self
    }

    /// The gRPC port's connection counters, rendered in `/metrics`.
    pub fn with_grpc_connections(mut self, connections: switchyard_server::Stats) -> AppState {
        self.grpc_connections = Some(connections);
        self
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Switchyard control plane",
        description = "Admin REST API: channels, credentials, routes, members, tokens, teams, \
                       prices, limits and budgets, shadow rules and their reports, settings, \
                       channel events, audit log, usage, explain, dry run, configuration export / \
                       plan / apply, admin tokens. Every path under \
                       /api/v1 needs `Authorization: Bearer TOKEN`: the bootstrap token \
                       (`SWITCHYARD_ADMIN_TOKEN`, role admin) or a named admin token. Each \
                       operation's `x-switchyard-role` is the least role that may call it \
                       (viewer < operator < admin); a lower role gets 403 `insufficient_role`."
    ),
    modifiers(&BearerAuth),
    security(("admin_token" = [])),
    components(schemas(ErrorBody))
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "admin_token",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// Every documented admin route, with its OpenAPI annotations.
fn api_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(channels::list, channels::create))
        .routes(routes!(
            channels::get_one,
            channels::patch,
            channels::delete
        ))
        .routes(routes!(channels::events))
        .routes(routes!(presets::list))
        .routes(routes!(credentials::list, credentials::create))
        .routes(routes!(
            credentials::get_one,
            credentials::patch,
            credentials::delete
        ))
        .routes(routes!(routes::list, routes::create))
        .routes(routes!(routes::get_one, routes::patch, routes::delete))
        .routes(routes!(members::list, members::create))
        .routes(routes!(members::get_one, members::patch, members::delete))
        .routes(routes!(tokens::list, tokens::create))
        .routes(routes!(tokens::get_one, tokens::patch, tokens::delete))
        .routes(routes!(teams::list, teams::create))
        .routes(routes!(teams::get_one, teams::patch, teams::delete))
        .routes(routes!(prices::list, prices::create))
        .routes(routes!(prices::get_one, prices::patch, prices::delete))
        .routes(routes!(limits::list, limits::create))
        .routes(routes!(limits::get_one, limits::patch, limits::delete))
        .routes(routes!(budgets::budgets))
        .routes(routes!(shadows::list, shadows::create))
        .routes(routes!(shadows::get_one, shadows::patch, shadows::delete))
        .routes(routes!(shadows::report))
        .routes(routes!(
            settings::get_settings,
            settings::put_settings,
            settings::patch_settings
        ))
        .routes(routes!(explain::explain))
        .routes(routes!(dry_run::dry_run))
        .routes(routes!(config_file::get_config))
        .routes(routes!(config_file::plan_config))
        .routes(routes!(config_file::apply_config))
        .routes(routes!(trial::trial))
        .routes(routes!(ops::shared_state))
        .routes(routes!(ops::audit))
        .routes(routes!(usage::usage))
        .routes(routes!(admin_tokens::whoami))
        .routes(routes!(admin_tokens::list, admin_tokens::create))
        .routes(routes!(admin_tokens::get_one, admin_tokens::revoke))
}

/// The OpenAPI 3.1 document of the admin API, exactly as `/api/v1/openapi.json` serves it.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let (_, openapi) = api_router().split_for_parts();
    openapi::finish(openapi)
}

/// The whole HTTP surface: authenticated admin API + open health and metrics endpoints.
pub fn app(state: AppState) -> Router {
    let (admin, openapi) = api_router().split_for_parts();
    let openapi = openapi::finish(openapi);
    let openapi = Arc::new(openapi);

    let admin = admin
        .route("/console/routes/explain", get(explain::explain))
        .route(
            "/api/v1/openapi.json",
            get(move || {
                let openapi = Arc::clone(&openapi);
                async move { Json(openapi.as_ref().clone()) }
            }),
        )
        // Set before the auth layer, so a wrong method on an admin path is still a 401 first.
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            access::authorize,
        ))
        .layer(DefaultBodyLimit::max(extract::MAX_BODY_BYTES));

    Router::new()
        .merge(admin)
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .merge(console::router())
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(unknown_endpoint)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state.metrics),
            crate::metrics::track,
        ))
        .with_state(state)
}

/// A path that exists, with a method it does not take: a JSON 405.
async fn method_not_allowed(method: Method) -> ApiError {
    ApiError::MethodNotAllowed {
        method: crate::error::bounded(method.as_str(), 32),
    }
}

/// No endpoint has this path: a JSON 404 (the path without its query string).
async fn unknown_endpoint(uri: Uri) -> ApiError {
    ApiError::UnknownEndpoint {
        path: crate::error::bounded(uri.path(), 256),
    }
}

/// Who is making a change, as the audit log records it: the admin token's name (`bootstrap` for
/// `SWITCHYARD_ADMIN_TOKEN`), followed by the optional `x-switchyard-actor` header in
/// parentheses (`bootstrap (alice@console)`). The header is a note, never the identity.
pub struct Actor(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Actor {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Actor, ApiError> {
        parts
            .extensions
            .get::<access::Caller>()
            .map(|caller| Actor(caller.actor.clone()))
            .ok_or(ApiError::Unauthorized)
    }
}

/// What a create, patch or delete handler hands to its `*_in` function: the [`Actor`] making the
/// change and the pool it runs on.
pub struct Writer {
    pub pool: PgPool,
    pub actor: String,
}

impl Writer {
    /// The change this request makes: its own audited revision.
    fn by(&self) -> rows::By<'_> {
        rows::By::each(&self.actor)
    }
}

impl FromRequestParts<AppState> for Writer {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Writer, ApiError> {
        let Actor(actor) = Actor::from_request_parts(parts, state).await?;
        Ok(Writer {
            pool: state.pool.clone(),
            actor,
        })
    }
}

/// Parses a JSON body: a syntax error is a 400, a well-formed body with a wrong or unknown field
/// is a 422 naming that field.
pub fn parse_body<T: DeserializeOwned>(body: &Bytes) -> ApiResult<T> {
    // serde would also accept a struct written as a JSON array; the API takes objects only.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::bad_request(
            None,
            "request body must be a JSON object",
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Ok(value) => Ok(value),
        Err(error) => {
            let path = error.path().to_string();
            let inner = error.into_inner();
            if inner.is_syntax() || inner.is_eof() {
                Err(ApiError::bad_request(
                    None,
                    format!("malformed JSON: {inner}"),
                ))
            } else {
                // Unknown fields are reported at the parent path; name the field itself.
                let param = if path == "." {
                    match unknown_field_name(&inner.to_string()) {
                        Some(field) => field,
                        // Not an object at all (`null`, a list...): a malformed request.
                        None => {
                            return Err(ApiError::bad_request(
                                None,
                                format!("request body must be a JSON object: {inner}"),
                            ))
                        }
                    }
                } else {
                    path
                };
                Err(ApiError::validation(
                    param.clone(),
                    format!("{param}: {inner}"),
                ))
            }
        }
    }
}

/// An admin request body [`validate_body`] checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    ChannelCreate,
    ChannelPatch,
    CredentialCreate,
    CredentialPatch,
    RouteCreate,
    RoutePatch,
    MemberCreate,
    MemberPatch,
    TeamCreate,
    TeamPatch,
    TokenCreate,
    TokenPatch,
    PriceCreate,
    PricePatch,
    LimitCreate,
    LimitPatch,
    /// `PUT /api/v1/settings`.
    Settings,
}

impl BodyKind {
    pub const ALL: [BodyKind; 17] = [
        BodyKind::ChannelCreate,
        BodyKind::ChannelPatch,
        BodyKind::CredentialCreate,
        BodyKind::CredentialPatch,
        BodyKind::RouteCreate,
        BodyKind::RoutePatch,
        BodyKind::MemberCreate,
        BodyKind::MemberPatch,
        BodyKind::TeamCreate,
        BodyKind::TeamPatch,
        BodyKind::TokenCreate,
        BodyKind::TokenPatch,
        BodyKind::PriceCreate,
        BodyKind::PricePatch,
        BodyKind::LimitCreate,
        BodyKind::LimitPatch,
        BodyKind::Settings,
    ];
}

/// Parses and validates an admin body as its handler does before touching the database. A
/// create body (or a settings document) gives its validated spec as the audit log records it
/// (no secret, no header value); a patch body is only parsed (its validation needs the stored
/// row) and gives `null`. Used by the fuzz targets (`fuzz/`): hostile bodies must come back as a
/// 400 or 422.
pub fn validate_body(kind: BodyKind, body: &Bytes) -> ApiResult<serde_json::Value> {
    use serde_json::Value;
    match kind {
        BodyKind::ChannelCreate => channels::create_detail(parse_body(body)?),
        BodyKind::CredentialCreate => credentials::create_detail(parse_body(body)?),
        BodyKind::RouteCreate => routes::create_detail(parse_body(body)?),
        BodyKind::MemberCreate => members::create_detail(parse_body(body)?),
        BodyKind::TeamCreate => teams::create_detail(parse_body(body)?),
        BodyKind::TokenCreate => tokens::create_detail(parse_body(body)?),
        BodyKind::PriceCreate => prices::create_detail(parse_body(body)?),
        BodyKind::LimitCreate => limits::create_detail(parse_body(body)?),
        BodyKind::Settings => {
            let settings = settings::merge_settings(serde_json::Map::new(), parse_body(body)?)?;
            serde_json::to_value(settings)
                .map_err(|e| ApiError::Internal(anyhow::anyhow!("settings: {e}")))
        }
        BodyKind::ChannelPatch => parse_body::<channels::ChannelPatch>(body).map(|_| Value::Null),
        BodyKind::CredentialPatch => {
            parse_body::<credentials::CredentialPatch>(body).map(|_| Value::Null)
        }
        BodyKind::RoutePatch => parse_body::<routes::RoutePatch>(body).map(|_| Value::Null),
        BodyKind::MemberPatch => parse_body::<members::MemberPatch>(body).map(|_| Value::Null),
        BodyKind::TeamPatch => parse_body::<teams::TeamPatch>(body).map(|_| Value::Null),
        BodyKind::TokenPatch => parse_body::<tokens::TokenPatch>(body).map(|_| Value::Null),
        BodyKind::PricePatch => parse_body::<prices::PricePatch>(body).map(|_| Value::Null),
        BodyKind::LimitPatch => parse_body::<limits::LimitPatch>(body).map(|_| Value::Null),
    }
}

fn unknown_field_name(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    Some(rest.split('`').next()?.to_owned())
}

/// `Option<Option<T>>` for PATCH bodies: absent → `None`, `null` → `Some(None)`.
pub fn nullable<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    de: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(de).map(Some)
}

/// Adds the snapshot revision a write produced as a response header.
pub fn with_revision(revision: i64, response: impl IntoResponse) -> Response {
    let mut response = response.into_response();
    if let Ok(value) = HeaderValue::from_str(&revision.to_string()) {
        response
            .headers_mut()
            .insert("x-switchyard-revision", value);
    }
    response
}

/// `limit` (1..=500, default 50) and an opaque `cursor` from the previous page's `next_cursor`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

pub const DEFAULT_PAGE: i64 = 50;
pub const MAX_PAGE: i64 = 500;

impl PageQuery {
    /// (rows to fetch = limit + 1, id to start after).
    pub fn bounds(&self) -> ApiResult<(i64, i64)> {
        let limit = self.limit.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(ApiError::bad_request(
                Some("limit"),
                format!("limit must be between 1 and {MAX_PAGE}, got {limit}"),
            ));
        }
        let after = match self.cursor.as_deref() {
            None | Some("") => 0,
            Some(cursor) => cursor.parse::<i64>().map_err(|_| {
                ApiError::bad_request(Some("cursor"), "cursor is not one this API returned")
            })?,
        };
        Ok((limit + 1, after))
    }
}

/// One page of a list; `next_cursor` is `null` on the last page.
#[derive(Debug, Serialize, ToSchema)]
pub struct Page<T: ToSchema> {
    pub data: Vec<T>,
    pub next_cursor: Option<String>,
}

impl<T: ToSchema> Page<T> {
    /// Builds a page from `limit + 1` rows ordered by id.
    pub fn from_rows(rows: Vec<T>, fetch: i64, id_of: impl Fn(&T) -> i64) -> Page<T> {
        let (data, next_cursor) = cut_page(rows, fetch, id_of);
        Page { data, next_cursor }
    }
}

/// `fetch` = `limit + 1` rows ordered by id cut to `limit`, with the cursor of the next page when
/// there is one.
fn cut_page<T>(
    mut rows: Vec<T>,
    fetch: i64,
    id_of: impl Fn(&T) -> i64,
) -> (Vec<T>, Option<String>) {
    let limit = usize::try_from(fetch - 1).unwrap_or(0);
    let next_cursor = if rows.len() > limit {
        rows.truncate(limit);
        rows.last().map(|row| id_of(row).to_string())
    } else {
        None
    };
    (rows, next_cursor)
}

/// Reads a header for tests and handlers without pulling `http` in separately.
pub fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}
