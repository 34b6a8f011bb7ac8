//! The identifiers and the time unit every other module speaks in: the bottom of the crate,
//! depending on nothing.

pub type RouteId = i64;
pub type MemberId = i64;
pub type ChannelId = i64;
pub type CredentialId = i64;
pub type TeamId = i64;
pub type TokenId = i64;

/// Milliseconds since the Unix epoch. Wall-clock so that expiries can be shared between
/// instances through Redis; the engine never reads a clock, the caller passes `now`.
pub type UnixMillis = u64;
