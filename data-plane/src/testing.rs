//! Fixtures the unit tests of several modules share.

use switchyard_engine::{Capabilities, Channel, ChannelStatus, Provider};

/// An enabled channel of `provider` at `http://x`, without credentials, headers or retry
/// extras; `responses_api` as given.
pub(crate) fn channel(provider: Provider, responses_api: bool) -> Channel {
    Channel {
        id: 1,
        name: "c".into(),
        provider,
        base_url: "http://x".into(),
        status: ChannelStatus::Enabled,
        auto_ban: true,
        max_concurrency: None,
        capabilities: Capabilities::default(),
        credentials: vec![],
        retry_status_codes: vec![],
        retry_error_patterns: vec![],
        headers: vec![],
        secrets_withheld: false,
        responses_api,
        preset: None,
        passthrough: vec![],
    }
}
