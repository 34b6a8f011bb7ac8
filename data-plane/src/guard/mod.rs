//! Guardrails on the request path, the parts the guard phase (`phases::guard`) is made of: the
//! checkable texts of each protocol's requests, answers and stream events and writing changed
//! ones back (`text`), one rule's run and report (`check`), the external `webhook` and `moderation` checks, the
//! masked examples of a report (`mask`), and a guarded stream (`stream`, over the rules'
//! `window`, with a Responses stream's closing events in `responses` and the whole-answer
//! checks at its end in `whole`). The rules themselves, compiled once per snapshot, are the engine's.

pub mod check;
pub mod mask;
pub mod moderation;
pub mod responses;
pub mod stream;
pub mod text;
pub mod webhook;
pub mod whole;
pub mod window;
