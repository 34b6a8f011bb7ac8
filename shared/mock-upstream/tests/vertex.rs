//! Vertex AI as the mock speaks it, driven by the proxy's own token code
//! (`switchyard_upstream::vertex`): the token endpoint verifies assertions and issues tokens,
//! model paths need them and answer as Gemini; the proxy's token source caches a token, shares
//! one exchange among concurrent requests, refreshes before expiry, and reports a refusal.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use switchyard_mock_upstream::{vertex, Behavior, Matcher, MockUpstream};
use switchyard_upstream::vertex::token_source;
use switchyard_upstream::{build_client, HttpClient, TokenError, TransportCause};

const BUDGET: Duration = Duration::from_secs(5);

async fn generate(
    client: &HttpClient,
    mock: &MockUpstream,
    auth: Option<&str>,
) -> (StatusCode, Value) {
    let url = format!(
        "{}/v1/projects/{}/locations/us-central1/publishers/google/models/gemini-2.5-flash:generateContent",
        mock.base_url(),
        vertex::TEST_PROJECT
    );
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(url)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(auth) = auth {
        request = request.header(header::AUTHORIZATION, auth);
    }
    let body = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
    let response = client
        .request(request.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn tokens_are_issued_for_verified_assertions_cached_shared_and_refreshed() {
    let mock = MockUpstream::start().await.unwrap();
    let client = build_client(Duration::from_secs(2));
    // Without a token, or with one the mock never issued: Vertex's 401.
    let (status, body) = generate(&client, &mock, None).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["status"], "UNAUTHENTICATED");
    let (status, _) = generate(&client, &mock, Some("Bearer ya29.forged")).await;
    assert_eq!(status, 401);

    let source = token_source(&mock.vertex_service_account()).unwrap();
    // Many concurrent requests for a token: one exchange.
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (source, client) = (Arc::clone(&source), client.clone());
        tasks.push(tokio::spawn(
            async move { source.bearer(&client, BUDGET).await },
        ));
    }
    let mut bearers = Vec::new();
    for task in tasks {
        bearers.push(task.await.unwrap().unwrap());
    }
    assert!(bearers.iter().all(|b| *b == bearers[0]));
    assert!(bearers[0].is_sensitive());
    assert_eq!(mock.vertex_token_exchanges(), 1);
    let bearer = bearers[0].to_str().unwrap().to_owned();
    let (status, body) = generate(&client, &mock, Some(&bearer)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["candidates"][0]["content"]["parts"][0]["text"].is_string());
    let recorded = mock.requests().pop().unwrap();
    assert_eq!(recorded.model.as_deref(), Some("gemini-2.5-flash"));
    assert_eq!(mock.vertex_token_exchanges(), 1, "the cached token is used");

    // A scripted error comes in Gemini's shape on a Vertex path.
    mock.on(
        Matcher::any().model("gemini-2.5-flash"),
        Behavior::status(429).retry_after(3).times(1),
    );
    let (status, body) = generate(&client, &mock, Some(&bearer)).await;
    assert_eq!(status, 429);
    assert_eq!(body["error"]["status"], "RESOURCE_EXHAUSTED");

    // Short-lived tokens are refreshed before they expire: a new exchange, a new token.
    let short = token_source(&vertex::service_account_json(
        &mock.vertex_token_uri(),
        vertex::TEST_PRIVATE_KEY_PEM,
    ))
    .unwrap();
    assert!(Arc::ptr_eq(&short, &source), "one source per key file");
    drop(short);
    mock.set_vertex_token_lifetime(Duration::from_secs(1));
    source.forget();
    let first = source.bearer(&client, BUDGET).await.unwrap();
    assert_eq!(mock.vertex_token_exchanges(), 2);
    let mut refreshed = None;
    for _ in 0..100 {
        let bearer = source.bearer(&client, BUDGET).await.unwrap();
        if bearer != first {
            refreshed = Some(bearer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refreshed = refreshed.expect("the token was refreshed");
    assert_eq!(mock.vertex_token_exchanges(), 3);
    let (status, _) = generate(&client, &mock, Some(refreshed.to_str().unwrap())).await;
    assert_eq!(status, 200);
    // The mock's last assertion verifies with the test public key.
    let assertion = mock.vertex_last_assertion().unwrap();
    let key =
        jsonwebtoken::DecodingKey::from_rsa_pem(vertex::TEST_PUBLIC_KEY_PEM.as_bytes()).unwrap();
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    validation.set_audience(&[mock.vertex_token_uri()]);
    jsonwebtoken::decode::<Value>(&assertion, &key, &validation).unwrap();
}

#[tokio::test]
async fn an_unknown_key_is_refused_with_invalid_grant() {
    let mock = MockUpstream::start().await.unwrap();
    let client = build_client(Duration::from_secs(2));
    let source = token_source(&mock.vertex_unregistered_service_account()).unwrap();
    let e = source.bearer(&client, BUDGET).await.unwrap_err();
    let TokenError::Refused { status, reason, .. } = &e else {
        panic!("{e:?}");
    };
    assert_eq!(*status, 400);
    assert_eq!(reason, "invalid_grant: Invalid JWT Signature.");
    assert_eq!(
        (mock.vertex_token_exchanges(), mock.vertex_token_refusals()),
        (0, 1)
    );
    let (status, _, body) = e
        .answer_as(
            switchyard_provider::Protocol::Gemini,
            vertex::TEST_CLIENT_EMAIL,
        )
        .unwrap();
    assert_eq!(status, 401);
    let text = String::from_utf8_lossy(&body);
    assert!(
        !text.contains("PRIVATE KEY") && !text.contains("ya29"),
        "{text}"
    );
    // Registered later (a key rotation reaching the endpoint): accepted.
    assert!(!mock.register_vertex_key(vertex::TEST_CLIENT_EMAIL, "not a key"));
    // A token endpoint that is down: a connect failure, not a refusal.
    let gone = token_source(&vertex::service_account_json(
        "http://127.0.0.1:9/token",
        vertex::TEST_PRIVATE_KEY_PEM,
    ))
    .unwrap();
    assert_eq!(
        gone.bearer(&client, BUDGET).await.unwrap_err(),
        TokenError::Connect(TransportCause::Refused)
    );
}

#[tokio::test]
async fn a_failed_refresh_keeps_the_unexpired_token_then_reports_the_refusal() {
    let mock = MockUpstream::start().await.unwrap();
    let client = build_client(Duration::from_secs(2));
    // Five-second tokens: refreshed from the fourth second on, expired at the fifth.
    mock.set_vertex_token_lifetime(Duration::from_secs(5));
    let source = token_source(&mock.vertex_service_account()).unwrap();
    let first = source.bearer(&client, BUDGET).await.unwrap();
    // The key is rotated away at the endpoint: every refresh is refused from now on.
    assert!(mock.register_vertex_key(
        vertex::TEST_CLIENT_EMAIL,
        vertex::UNREGISTERED_PUBLIC_KEY_PEM
    ));
    let mut kept = None;
    for _ in 0..400 {
        let got = source.bearer(&client, BUDGET).await;
        if mock.vertex_token_refusals() > 0 {
            kept = Some(got);
            break;
        }
        assert_eq!(got.unwrap(), first, "fresh: the cached token");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The refused refresh (in the last second of the token's life) kept the current token.
    assert_eq!(kept.expect("a refresh was tried").unwrap(), first);
    // Once it has expired, the refusal is reported.
    let mut refused = None;
    for _ in 0..400 {
        if let Err(e) = source.bearer(&client, BUDGET).await {
            refused = Some(e);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        matches!(refused, Some(TokenError::Refused { .. })),
        "{refused:?}"
    );
    assert_eq!(mock.vertex_token_exchanges(), 1);
}
