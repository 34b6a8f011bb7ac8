//! The gateway's own answer to a call that needs no upstream (a count of tokens towards OpenAI,
//! which has no such endpoint: the plan's local estimate).

use axum::body::Body;
use bytes::Bytes;
use http::StatusCode;
use switchyard_engine::RandomSource;

use super::exchange::{json_headers, Attempt, SendError, Upstream, UpstreamResponse};

/// The planned local answer's body.
pub struct Local<'a>(pub &'a Bytes);

impl Upstream for Local<'_> {
    async fn send(
        &self,
        _: &Attempt<'_>,
        _: &mut (impl RandomSource + Send),
    ) -> Result<UpstreamResponse, SendError> {
        Ok(UpstreamResponse {
            status: StatusCode::OK,
            headers: json_headers(),
            body: Body::from(self.0.clone()),
        })
    }
}
