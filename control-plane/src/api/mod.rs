//! The admin REST API (docs/src/reference/control-plane-api.md): one router built from the
//! handlers' own OpenAPI annotations (or, for the generic handlers of `crud.rs`, from the
//! operations built beside their routes), so `/api/v1/openapi.json` always lists exactly the
//! routes that exist. This module only declares the API's modules, builds that router and re-exports;
//! what the handlers share sits below them: [`crate::state::AppState`], the extractors and body
//! parsing (`extract.rs`), pages and the revision header (`reply.rs`) and the row code
//! (`rows.rs`).
//!
//! The resources' create, list, read, update and delete (channels, credentials, routes, members,
//! tokens, teams, prices, limits, shadows) are one set of generic handlers (`crud.rs`): a resource
//! states its view, its create and update bodies, what a create answers, the resource it is
//! created under (credentials under a channel, members under a route) and the few OpenAPI facts
//! that differ (`crud::Item`), and `crud.rs` builds both the axum routes and their OpenAPI
//! operations from them. Creates, updates and deletes go through the module's own `create_in` /
//! `patch_in` / `delete_in`, the one resource layer that applying a configuration file and the dry
//! run call too. Admin tokens, revoked rather than deleted and never updated, keep their own
//! handlers. A duplicate finder still pairs the resource layer's `create_in` / `patch_in`
//! signatures (the same `db, by, [id,] body` parameters in every module); their bodies differ.

pub mod access;
mod admin_tokens;
mod amount;
mod bodies;
mod budgets;
mod cache_rules;
mod cache_trial;
mod channels;
pub(crate) mod config_file;
mod console;
mod credentials;
mod crud;
mod dry_run;
mod explain;
mod explain_semantic;
mod extract;
mod guard_explain;
mod guard_schema;
mod guardrail_report;
mod guardrails;
mod limits;
mod members;
mod openapi;
mod ops;
mod presets;
mod prices;
mod reply;
mod requests;
mod routes;
mod rows;
pub mod schema;
mod settings;
mod shadows;
mod sso;
mod teams;
mod tokens;
mod trial;
mod usage;
mod webhooks;

use std::sync::Arc;

pub use bodies::{validate_body, BodyKind};
pub use tokens::token_hash;

use axum::extract::DefaultBodyLimit;
use axum::http::{Method, Uri};
use axum::routing::get;
use axum::{Json, Router};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

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
        .routes(crud::listed::<channels::ChannelView>())
        .routes(crud::created::<channels::ChannelView>())
        .routes(crud::item::<channels::ChannelView>())
        .routes(routes!(channels::events))
        .routes(routes!(presets::list))
        .routes(crud::listed_under::<
            channels::ChannelView,
            credentials::CredentialView,
        >("channel_id"))
        .routes(crud::created::<credentials::CredentialView>())
        .routes(crud::item::<credentials::CredentialView>())
        .routes(crud::listed::<routes::RouteView>())
        .routes(crud::created::<routes::RouteView>())
        .routes(crud::item::<routes::RouteView>())
        .routes(crud::listed_under::<routes::RouteView, members::MemberView>("route_id"))
        .routes(crud::created::<members::MemberView>())
        .routes(crud::item::<members::MemberView>())
        .routes(crud::listed::<tokens::TokenView>())
        .routes(crud::created::<tokens::TokenView>())
        .routes(crud::item::<tokens::TokenView>())
        .routes(crud::listed::<teams::TeamView>())
        .routes(crud::created::<teams::TeamView>())
        .routes(crud::item::<teams::TeamView>())
        .routes(crud::listed::<prices::PriceView>())
        .routes(crud::created::<prices::PriceView>())
        .routes(crud::item::<prices::PriceView>())
        .routes(crud::listed::<limits::LimitView>())
        .routes(crud::created::<limits::LimitView>())
        .routes(crud::item::<limits::LimitView>())
        .routes(routes!(budgets::budgets))
        .routes(crud::listed::<shadows::ShadowView>())
        .routes(crud::created::<shadows::ShadowView>())
        .routes(crud::item::<shadows::ShadowView>())
        .routes(routes!(shadows::report))
        .routes(crud::listed::<cache_rules::CacheRuleView>())
        .routes(crud::created::<cache_rules::CacheRuleView>())
        .routes(crud::item::<cache_rules::CacheRuleView>())
        .routes(routes!(cache_trial::trial))
        .routes(crud::listed::<guardrails::GuardrailView>())
        .routes(crud::created::<guardrails::GuardrailView>())
        .routes(crud::item::<guardrails::GuardrailView>())
        .routes(routes!(guardrail_report::report))
        .routes(crud::listed::<webhooks::WebhookView>())
        .routes(crud::created::<webhooks::WebhookView>())
        .routes(crud::item::<webhooks::WebhookView>())
        .routes(routes!(webhooks::deliveries))
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
        .routes(routes!(requests::list_requests))
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
        .merge(sso::router())
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
