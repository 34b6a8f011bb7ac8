//! A scriptable mock of an OpenAI-compatible upstream (plus Anthropic `/v1/messages`), for tests,
//! demos and failover drills.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use std::time::Duration;
//! use switchyard_mock_upstream::{Behavior, Matcher, MockUpstream};
//!
//! let mock = MockUpstream::start().await?;
//! mock.on(
//!     Matcher::path("/v1/chat/completions").credential("sk-a"),
//!     Behavior::status(429).retry_after(7).times(2),
//! );
//! mock.on(Matcher::any().model("slow"), Behavior::ok().latency(Duration::from_millis(200)));
//! // point a client at mock.base_url() ...
//! assert_eq!(mock.hits(), 0);
//! # Ok(()) }
//! ```
//!
//! Rules are checked in insertion order; the first matching rule with uses left answers, and
//! when none matches the endpoint's default OK answer is served. The answers' shapes come from
//! [`sim`], which the data plane's in-process `provider: mock` uses too.

mod control;
mod respond;
mod script;
mod server;
pub mod sim;

pub use control::{BehaviorSpec, MatcherSpec, RuleSpec, StreamSpec};
pub use respond::DEFAULT_STREAM_CHUNKS;
pub use script::{Behavior, HitCounts, Matcher, RecordedRequest, RuleReport, StreamShape};
pub use server::{MockOptions, MockUpstream};
