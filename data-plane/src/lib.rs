//! Switchyard's data plane: the OpenAI/Anthropic-compatible proxy. It selects with the pure engine
//! on the latest snapshot, fails over (docs/src/concepts/routing.md), and reports outcomes to the
//! [`StateStore`](switchyard_state::StateStore).
//!
//! Code map: `server` (HTTP edge: router, model listing, each request's id and span) →
//! `phases` (receive → route → admit → proxy → finish over one per-request `context`) →
//! `failover` (the proxy phase: the one retry loop; `realtime` opens and relays a Realtime API
//! session in its place) → `attempt` (one upstream call and its
//! classification) → `upstream` (the upstream as one trait: HTTP, Bedrock over HTTP, the `mock`
//! simulator, the gateway's own answer); `relay` streams a committed response; `record` writes
//! the request's line; `shadow` samples finished requests for the shadow rules and keeps the
//! rules' caps and queues, which `shadow_send` empties (a task above the state, which it reads
//! whole); [`snapshot`] keeps the compiled view of the current snapshot; [`config`] turns the
//! standalone YAML into a snapshot; `operator` serves the health, readiness and metrics
//! endpoints; `files` serves OpenAI's Files and Batch APIs and Anthropic's message batches on the
//! channel each object lives on, named by its id ([`object_id`]); `run` builds the state and wires it all. [`AppState`] (`state`) is the bottom
//! every module reads: it calls none of them.

mod admission;
mod answer;
#[cfg(test)]
mod answer_matrix_tests;
mod attempt;
mod attribution;
mod auth;
pub mod cache;
mod cli;
pub mod config;
mod context;
mod endpoint;
mod errors;
mod failover;
mod files;
mod guard;
mod metrics;
pub mod object_id;
mod operator;
mod phases;
pub mod probe;
mod realtime;
mod record;
mod relay;
pub mod request;
mod response_cache;
mod run;
mod semantic_index;
mod semantic_tail;
mod server;
mod shadow;
mod shadow_send;
pub mod snapshot;
mod state;
mod telemetry;
#[cfg(test)]
mod testing;
mod upstream;
pub mod usage;
mod wire;
mod workers;

// For other crates (the binary, the tests, the fuzz targets, the end-to-end runner): inside
// this crate every item is imported from the module that defines it, never through these
// re-exports.
#[doc(hidden)]
pub use answer::{completion_verdicts, BodyCheck};
#[doc(hidden)]
pub use response_cache::{
    canonical::Canonical as CanonicalBody, canonical::FACTS as CACHE_JUDGED_FIELDS,
    key::normalised as normalised_cache_body,
};
pub use run::main_with;
pub use server::app;
pub use state::AppState;

/// Wall-clock Unix milliseconds (shared state expiries are wall-clock so instances agree).
pub use switchyard_state::unix_ms;
