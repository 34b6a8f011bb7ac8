//! Switchyard's selection engine: which upstream member serves a request, and why.
//!
//! Architecture invariant: this crate is pure. No I/O, no clock reads, no global RNG. A
//! [`Snapshot`], a [`HealthView`], a [`SelectionConstraint`], `now` and a [`RandomSource`] go in;
//! a [`Decision`] with its full explanation comes out. The data plane selects with [`select`] and
//! the control plane's explain serialises the very same [`Decision`].

pub mod cache;
pub mod catalog;
pub mod constraint;
pub mod decision;
pub mod fxhash;
pub mod guard;
pub mod health;
pub mod ids;
pub mod limit;
pub mod model;
pub mod passthrough;
pub mod pattern;
pub mod rng;
mod select;
pub mod semantic;
pub mod settings;
pub mod shadow;
pub mod slots;
pub mod subject;
pub mod validate;

pub use cache::{CacheEndpoint, CacheRule, CacheScope, SemanticMode, SemanticPart};
pub use constraint::{RequestNeeds, SelectionConstraint};
pub use decision::{
    CanaryDraw, Candidate, Decision, Outcome, Pool, Reason, Reasons, RetryBudget, Sticky, Strategy,
    Via,
};
pub use health::{
    DenseHealth, HealthRecord, HealthSnapshot, HealthView, NoHealth, Recovering, StickyBinding,
};
pub use limit::{
    price_for, Limit, LimitKey, LimitMode, LimitRule, Metric, Price, ScopeKind, Window,
};
pub use model::{
    Capabilities, Channel, ChannelAuth, ChannelId, ChannelStatus, Credential, CredentialId, Member,
    MemberId, PlanEntry, Provider, Route, RouteId, RoutingMode, SecretSource, Snapshot,
    SnapshotParts, Team, TeamId, Token, TokenId, UnixMillis, AZURE_BIT, CHAT_COMPLETIONS_ONLY_BIT,
    DEFAULT_GROUP,
};
pub use pattern::{validate_pattern, wildcard_match, RouteIndex};
pub use rng::{RandomSource, SplitMix64};
pub use select::select;
pub use settings::Settings;
pub use shadow::{ShadowRule, ShadowTarget, StopReason};
pub use slots::HealthSlots;
