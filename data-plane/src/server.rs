//! The HTTP edge: the router and the [`Gateway`] in front of it, the model listing, and each
//! proxied request's arrival (its request id, seed and trace span) handed to the phases
//! ([`crate::phases`]: receive → route → admit → proxy → finish). The operator endpoints
//! (`/metrics`, `/readyz`, `/healthz`, [`crate::operator`]) are routed here too.

use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::Router;
use http::{header, HeaderMap, HeaderValue};
use serde_json::json;
use switchyard_engine::wildcard_match;
use switchyard_provider::Protocol;

use crate::auth::authenticate;
use crate::context::Arrival;
use crate::endpoint::Endpoint;
use crate::errors::GatewayError;
use crate::phases;
use crate::state::AppState;

/// The data plane's service: [`Gateway`] in front of [`router`].
pub fn app(state: Arc<AppState>) -> Gateway {
    Gateway {
        router: router(state.clone()),
        state,
    }
}

/// The proxied endpoints' `POST`s go straight to their handler, every other request through the
/// router. The router answers those `POST`s the same way (its routes call the same handler,
/// through the same draining rule); going around it saves its matching, its boxed route
/// services and its response layer: 5 % of a proxied request's instructions, 12 allocations.
#[derive(Clone)]
pub struct Gateway {
    state: Arc<AppState>,
    router: Router,
}

impl tower::Service<Request> for Gateway {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = futures_util::future::Either<
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response, Self::Error>> + Send>>,
        <Router as tower::Service<Request>>::Future,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        // Neither the handler nor the router ever waits to be ready.
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        use futures_util::future::Either;
        match proxied_endpoint(request.method(), request.uri().path()) {
            Some(endpoint) => {
                let state = Arc::clone(&self.state);
                Either::Left(Box::pin(async move {
                    let response = handle(Arc::clone(&state), endpoint, None, request).await;
                    Ok(closed_when_draining(&state, response))
                }))
            }
            None => Either::Right(self.router.call(request)),
        }
    }
}

/// The endpoint a request is the `POST` of, when its handler takes it without the router: every
/// endpoint at its own fixed path (the Gemini ones and `/v1/models` carry a model in the path
/// and stay with the router).
fn proxied_endpoint(method: &http::Method, path: &str) -> Option<Endpoint> {
    if method != http::Method::POST {
        return None;
    }
    Endpoint::ALL
        .into_iter()
        .filter(|e| routed_by_path(*e))
        .find(|e| e.path() == path)
}

/// Whether `endpoint` is served at its own fixed path (see [`proxied_endpoint`]).
fn routed_by_path(endpoint: Endpoint) -> bool {
    !matches!(
        endpoint,
        Endpoint::Models
            | Endpoint::GeminiGenerate
            | Endpoint::GeminiCountTokens
            | Endpoint::Passthrough
            | Endpoint::Realtime
            | Endpoint::Files
            | Endpoint::Batches
            | Endpoint::MessageBatches
    )
}

/// The router: every path the data plane serves.
fn router(state: Arc<AppState>) -> Router {
    let mut router = crate::operator::routes()
        .merge(crate::files::routes())
        .route("/v1/models", get(models))
        // `GET /v1/models/{id}` is OpenAI's; `POST` on the same path is Gemini's newer API
        // generation (`/v1/models/{model}:generateContent`, what google-genai 3.x calls).
        .route("/v1/models/{id}", get(model).post(gemini))
        .route("/v1beta/models/{target}", post(gemini))
        .route("/passthrough/{channel}/{*path}", any(passthrough))
        .route(Endpoint::Realtime.path(), get(realtime));
    for endpoint in Endpoint::ALL.into_iter().filter(|e| routed_by_path(*e)) {
        router = router.route(
            endpoint.path(),
            post(
                move |State(state): State<Arc<AppState>>, request: Request| async move {
                    handle(state, endpoint, None, request).await
                },
            ),
        );
    }
    router
        .layer(axum::middleware::map_response_with_state(
            state.clone(),
            close_when_draining,
        ))
        .fallback(|request: Request| async move { not_found(request.uri().path()) })
        .method_not_allowed_fallback(|request: Request| async move {
            let protocol = protocol_of_path(request.uri().path());
            GatewayError::MethodNotAllowed(request.method().clone()).into_response(protocol)
        })
        .with_state(state)
}

/// While draining, every answer asks the client to close its connection, so pooled keep-alive
/// clients (load balancers, SDKs) move to another proxy before this one stops listening.
async fn close_when_draining(State(state): State<Arc<AppState>>, response: Response) -> Response {
    closed_when_draining(&state, response)
}

fn closed_when_draining(state: &AppState, mut response: Response) -> Response {
    if state.draining.is_cancelled() {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// `POST /v1beta/models/{model}:{action}` and `POST /v1/models/{model}:{action}`: the Gemini
/// API of both path generations.
async fn gemini(
    State(state): State<Arc<AppState>>,
    Path(target): Path<String>,
    request: Request,
) -> Response {
    match gemini_target(&target) {
        Some((endpoint, model, stream)) => {
            handle(state, endpoint, Some((model, stream)), request).await
        }
        None => not_found(request.uri().path()),
    }
}

/// `{model}:{action}` of a Gemini path: the endpoint, the model and whether it streams.
fn gemini_target(target: &str) -> Option<(Endpoint, String, bool)> {
    let (model, action) = target.rsplit_once(':')?;
    let (endpoint, stream) = match action {
        "generateContent" => (Endpoint::GeminiGenerate, false),
        "streamGenerateContent" => (Endpoint::GeminiGenerate, true),
        "countTokens" => (Endpoint::GeminiCountTokens, false),
        _ => return None,
    };
    Some((endpoint, model.to_owned(), stream))
}

/// The protocol a path belongs to, for errors on paths no endpoint serves.
fn protocol_of_path(path: &str) -> Protocol {
    if path.starts_with("/v1/messages") {
        Protocol::Anthropic
    } else if path.starts_with("/v1beta")
        || path
            .strip_prefix("/v1/models/")
            .is_some_and(|target| target.contains(':'))
    {
        Protocol::Gemini
    } else {
        Protocol::OpenAi
    }
}

fn not_found(path: &str) -> Response {
    GatewayError::NotFound.into_response(protocol_of_path(path))
}

/// `GET /v1/models`: the exact-pattern models this token may call.
async fn models(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let response = list_models(&state, &headers, None);
    state
        .metrics
        .request(Endpoint::Models, "", "", response.status().as_u16());
    response
}

/// `GET /v1/models/{id}`: one model this token may call, or a 404 in the OpenAI shape.
async fn model(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let response = list_models(&state, &headers, Some(&id));
    state
        .metrics
        .request(Endpoint::Models, "", "", response.status().as_u16());
    response
}

fn list_models(state: &AppState, headers: &HeaderMap, one: Option<&str>) -> Response {
    let Some(view) = state.views.load_full() else {
        return GatewayError::not_ready().into_response(Protocol::OpenAi);
    };
    let Some(token) = authenticate(&view, headers, None) else {
        return GatewayError::unauthorized().into_response(Protocol::OpenAi);
    };
    let team = token.team_id.and_then(|id| view.snapshot.team(id));
    let data: Vec<_> = view
        .snapshot
        .routes()
        .iter()
        .filter(|r| r.enabled && !switchyard_engine::pattern::is_wildcard(&r.model_pattern))
        .filter(|r| {
            token.team_id.is_none()
                || team.is_some_and(|t| {
                    t.models
                        .iter()
                        .any(|p| p.trim() == r.model_pattern || wildcard_match(p.trim(), &r.model_pattern))
                })
        })
        .filter(|r| one.is_none_or(|id| r.model_pattern == id))
        .map(|r| json!({"id": r.model_pattern, "object": "model", "created": 0, "owned_by": "switchyard"}))
        .collect();
    if let Some(id) = one {
        let Some(found) = data.into_iter().next() else {
            let model: String = id.chars().take(crate::request::MAX_MODEL_LEN).collect();
            return GatewayError::ModelNotFound { model }.into_response(Protocol::OpenAi);
        };
        return (
            [(header::CONTENT_TYPE, "application/json")],
            found.to_string(),
        )
            .into_response();
    }
    (
        [(header::CONTENT_TYPE, "application/json")],
        json!({"object": "list", "data": data}).to_string(),
    )
        .into_response()
}

/// `ANY /passthrough/{channel}/{path}`: a path of one channel's own API (see
/// [`phases::passthrough`]).
async fn passthrough(
    State(state): State<Arc<AppState>>,
    Path((channel, _)): Path<(String, String)>,
    request: Request,
) -> Response {
    let arrival = arrive(&state, Endpoint::Passthrough, &request);
    Box::pin(phases::passthrough::serve(state, arrival, channel, request)).await
}

/// `GET /v1/realtime`: a Realtime API session (a WebSocket), from its arrival to its answer
/// (`101`, or an error before the upgrade); the session itself outlives this request.
async fn realtime(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let arrival = arrive(&state, Endpoint::Realtime, &request);
    Box::pin(phases::serve_realtime(state, arrival, request)).await
}

/// The edge of a proxied request: its arrival ([`arrive`]); the phases do the rest.
async fn handle(
    state: Arc<AppState>,
    endpoint: Endpoint,
    path_model: Option<(String, bool)>,
    request: Request,
) -> Response {
    let arrival = arrive(&state, endpoint, &request);
    // Boxed: the request's future (about 2 KB: the phases box the failover below them) is moved
    // once, into this box, and this one, moved into a box of its own by whoever serves it (the
    // gateway, the router), stays small (`scripts/future-sizes` lists the sizes).
    Box::pin(phases::serve(state, arrival, path_model, request)).await
}

/// A request as the edge takes it in (see [`Arrival::new`]).
fn arrive(state: &AppState, endpoint: Endpoint, request: &Request) -> Arrival {
    Arrival::new(endpoint, state.next_seed(), request.headers())
}

#[cfg(test)]
mod tests {
    use http::Method;

    use super::*;

    /// The gateway takes exactly the `POST`s the router would hand to [`handle`] at a fixed
    /// path; every other method, path and endpoint goes through the router.
    #[test]
    fn the_gateway_takes_the_posts_of_the_fixed_paths_only() {
        for endpoint in Endpoint::ALL {
            let taken = proxied_endpoint(&Method::POST, endpoint.path());
            if routed_by_path(endpoint) {
                assert_eq!(taken, Some(endpoint), "{endpoint:?}");
            } else {
                // `/v1/models`, `/v1beta/models` and `/passthrough` are no endpoint's fixed path.
                assert_eq!(taken, None, "{endpoint:?}");
            }
        }
        assert_eq!(proxied_endpoint(&Method::GET, "/v1/chat/completions"), None);
        assert_eq!(proxied_endpoint(&Method::PUT, "/v1/messages"), None);
        for path in [
            "/v1/chat/completions/",
            "/v1/chat/completion",
            "/V1/chat/completions",
            "/v1/models/m:generateContent",
            "/v1beta/models/m:generateContent",
            "/healthz",
            "",
        ] {
            assert_eq!(proxied_endpoint(&Method::POST, path), None, "{path}");
        }
        assert!(routed_by_path(Endpoint::ChatCompletions));
        assert!(!routed_by_path(Endpoint::Models));
        assert!(!routed_by_path(Endpoint::GeminiGenerate));
        assert!(!routed_by_path(Endpoint::GeminiCountTokens));
    }
}
