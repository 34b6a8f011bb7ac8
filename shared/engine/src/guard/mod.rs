//! Guardrails: checks on what goes into an upstream and what comes back, fleet-wide. A rule
//! ([`rule::Guardrail`]) is attached to a route, a team, a token or all traffic, runs on the
//! request, the answer or both, and blocks, redacts or logs what its checks find (or, in shadow
//! mode, only reports what it would have done).
//!
//! Pure code, compiled once per snapshot ([`compile::CompiledGuards`]): the built-in detectors
//! (`detect`), user patterns, size, tool and JSON schema verdicts (`schema`), redaction with an
//! exact restore (`redact`) and the stream window (`window`). Webhook and moderation checks are
//! configuration here; the data plane makes those calls.

pub mod compile;
pub mod detect;
pub mod finding;
pub mod redact;
pub mod rule;
pub mod schema;
pub mod window;
