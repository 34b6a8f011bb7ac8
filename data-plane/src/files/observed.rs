//! A files or batch call, served as every request is: admitted under its key's and its team's
//! limits (and, for a create routed by its model, the route's), counted in the request metric
//! under its endpoint (`files`, `batches`, `message_batches`) and its channel, and written as one
//! request line — the finish every request gets. A call counts as one request; its tokens are
//! not counted when it is made (a batch's are charged when it completes), and the concurrency
//! slots it takes are held until its answer's body ends.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::HeaderMap;
use switchyard_engine::{Channel, Route};
use tracing::Instrument;

use super::caller::Caller;
use crate::admission::{self, Held};
use crate::context::Arrival;
use crate::endpoint::Endpoint;
use crate::errors::GatewayError;
use crate::phases::admit::admit_under;
use crate::phases::finish::{finish, name_client};
use crate::phases::guard::refuse_uninspectable;
use crate::record::Trail;
use crate::state::AppState;

/// One files or batch call from its arrival to its finish: what the request line and the
/// metrics will say of it.
pub struct Observed {
    arrival: Arrival,
    trail: Box<Trail>,
    /// The model a create was routed by (empty for the other calls).
    model: String,
}

impl Observed {
    /// A call of `endpoint` as the edge takes it in (its request id, its span).
    pub fn arrive(state: &AppState, endpoint: Endpoint, headers: &HeaderMap) -> Observed {
        Observed {
            arrival: Arrival::new(endpoint, state.next_seed(), headers),
            trail: Box::default(),
            model: String::new(),
        }
    }

    /// Serves the call by `serve` inside its trace span, then finishes it ([`Observed::finish`]).
    pub async fn serve(
        mut self,
        state: &AppState,
        serve: impl AsyncFnOnce(&mut Observed) -> Result<Response, GatewayError>,
    ) -> Response {
        let span = self.arrival.span.clone();
        let result = serve(&mut self).instrument(span).await;
        self.finish(state, result)
    }

    /// The calling key, authenticated (and named in the line), not yet admitted.
    pub fn caller(
        &mut self,
        state: &AppState,
        headers: &HeaderMap,
    ) -> Result<Caller, GatewayError> {
        let caller = Caller::of(state, headers)?;
        name_client(&caller.view, &caller.token, &mut self.trail);
        Ok(caller)
    }

    /// The calling key, authenticated and admitted under its key's and its team's limits (a
    /// call that is not routed by a model).
    pub async fn admitted(
        &mut self,
        state: &AppState,
        headers: &HeaderMap,
    ) -> Result<Caller, GatewayError> {
        let caller = self.caller(state, headers)?;
        self.admit(state, &caller, None).await?;
        Ok(caller)
    }

    /// Admits the call of `caller` under its key's and its team's limits and, for a call
    /// routed to `route`, the route's: one request counted, concurrency slots taken, no tokens.
    /// A refusal is the client's `429`.
    pub async fn admit(
        &mut self,
        state: &AppState,
        caller: &Caller,
        route: Option<&Route>,
    ) -> Result<(), GatewayError> {
        self.trail.route = route.map(|r| (r.id, r.model_pattern.clone()));
        // An upload's or a batch's content is not inspected: a rule may refuse it.
        let scope = (
            route.map(|r| r.id),
            caller.token.team_id,
            Some(caller.token.id),
        );
        refuse_uninspectable(
            state,
            caller.view.snapshot.guards(),
            self.arrival.endpoint,
            scope,
            &self.arrival.request_id,
        )?;
        let model = Some(self.model.as_str()).filter(|m| !m.is_empty());
        let limits = admission::client_limits(
            &caller.view.snapshot,
            &caller.token,
            route.map(|r| r.id),
            model,
            switchyard_engine::subject::Attribution::default(),
        );
        admit_under(state, &caller.token, limits, 0, &mut self.trail).await
    }

    /// The call goes to `channel` (the metric's and the line's channel).
    pub fn at(&mut self, channel: &Channel) {
        self.trail.final_channel = Some(channel.name.clone());
    }

    /// The call was routed by `model` (the line's model).
    pub fn routed_by(&mut self, model: &str) {
        model.clone_into(&mut self.model);
    }

    /// Finishes the call with its answer, or its error in the endpoint's protocol: the
    /// gateway's headers, the metrics and the request line; the limits it was admitted under
    /// are held until the answer's body ends.
    pub fn finish(mut self, state: &AppState, result: Result<Response, GatewayError>) -> Response {
        let protocol = self.arrival.endpoint.protocol();
        let mut response = result.unwrap_or_else(|e| e.into_response(protocol));
        if let Some(held) = self.trail.admitted.take() {
            let (parts, body) = response.into_parts();
            let body = Body::new(Holding { body, _held: held });
            response = Response::from_parts(parts, body);
        }
        finish(state, self.arrival, response, self.trail, self.model)
    }
}

/// An answer's body holding the limits its call was admitted under (their concurrency slots)
/// until it ends or is dropped.
struct Holding {
    body: Body,
    _held: Held,
}

impl http_body::Body for Holding {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
