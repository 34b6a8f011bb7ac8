//! Switchyard's control plane: Postgres route tables, the admin REST API, explain, and route
//! snapshots streamed to proxies over gRPC.
//!
//! Architecture invariant: every admin write goes through [`db::commit_write`], which audits it,
//! bumps the snapshot revision and NOTIFYs, in the writer's own transaction.
//! Architecture invariant: explain calls the engine's `select` on the same in-memory snapshot the
//! gRPC stream serves (with the fleet's shared-state view when `REDIS_URL` is set), and writes
//! nothing anywhere.
//! Architecture invariant: the recovery job changes a channel's status only through
//! `commit_write`, under the row lock, from the status it expects; a manual disable always wins.

pub mod api;
pub(crate) mod cli;
pub mod compile;
pub(crate) mod config;
pub mod db;
pub(crate) mod entry;
pub mod error;
pub mod grpc;
pub(crate) mod guardrail_report;
pub mod live;
pub(crate) mod log_retention;
pub mod metrics;
pub mod notify;
pub(crate) mod proxies;
pub mod publisher;
pub mod recovery;
pub mod request_log;
pub mod role;
pub(crate) mod semantic;
pub(crate) mod server;
pub(crate) mod shadow;
pub mod spend;
pub mod sso;
pub(crate) mod state;
pub(crate) mod telemetry;
pub mod usage;

// For other crates (the binary, the tests, the end-to-end runner): inside this crate every item
// is imported from the module that defines it, never through these re-exports.
pub use api::app;
pub use entry::main_with;
pub use state::AppState;
