//! OpenAI's Files and Batch APIs through the gateway. A file and the batches that use it live
//! on one channel, so every call after the upload goes to the channel that holds the object,
//! named by the object's id itself ([`crate::object_id`]: the upstream's id wrapped with the
//! channel and the key that made it, under an HMAC tag): no database on the request path, and a
//! key reaches only its own objects — any other id is answered `404 not_found`, the same for an
//! unknown, forged, altered or another key's id.
//!
//! The upload is routed like a request for its model (route rules, the key's team and route
//! group apply; only OpenAI-protocol channels with a base URL are eligible): a `batch` file's
//! model is its first line's `body.model` (every line must name one), any other file's the
//! `x-switchyard-model` header. A key's files and batches are listed from its index in the
//! shared state ([`crate::files::index`]). When a batch is first seen `completed`, its output
//! is read once fleet-wide and its usage accounted like requests' ([`account`]).
//!
//! Anthropic's Message Batches API is served the same way (`message_batches`): a batch of
//! inline requests is routed by its first request's model among Anthropic channels.
//!
//! Every call is observed as a request (`observed`): admitted under the key's and its team's
//! limits (a routed create also under its route's), counted in the request metric and written
//! as a request line under its endpoint (`files`, `batches`, `message_batches`).
//!
//! Parts: `caller` (the key and the ids it may open) at the bottom, `channel` (one call to the
//! channel holding an object), `upload` (the channel an upload goes to), `index` (a key's
//! list), `account`, `observed` (a call's admission and finish), then `handlers` (OpenAI's
//! endpoints) and `message_batches` (Anthropic's).

mod account;
mod caller;
mod channel;
mod handlers;
mod index;
mod message_batches;
mod observed;
mod upload;

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

use crate::state::AppState;

/// The Files and Batch API routes, for the edge's router.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route(
            "/v1/files",
            post(handlers::upload).get(handlers::list_files),
        )
        .route(
            "/v1/files/{id}",
            get(handlers::get_file).delete(handlers::delete_file),
        )
        .route("/v1/files/{id}/content", get(handlers::file_content))
        .route(
            "/v1/batches",
            post(handlers::create_batch).get(handlers::list_batches),
        )
        .route("/v1/batches/{id}", get(handlers::get_batch))
        .route("/v1/batches/{id}/cancel", post(handlers::cancel_batch))
        .route(
            "/v1/messages/batches",
            post(message_batches::create).get(message_batches::list_batches),
        )
        .route(
            "/v1/messages/batches/{id}",
            get(message_batches::get).delete(message_batches::delete),
        )
        .route(
            "/v1/messages/batches/{id}/cancel",
            post(message_batches::cancel),
        )
        .route(
            "/v1/messages/batches/{id}/results",
            get(message_batches::results),
        )
}
