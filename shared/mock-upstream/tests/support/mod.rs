//! A small real HTTP client for the socket-level tests.

#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// What came back: the head, the body bytes received, and whether the body ended in an error.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub body_error: Option<String>,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The SSE events received, each without its trailing blank line (CRLF line ends, as
    /// Gemini sends them, are read as LF).
    pub fn events(&self) -> Vec<String> {
        self.text()
            .replace("\r\n", "\n")
            .split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .map(str::to_owned)
            .collect()
    }
}

pub struct Call<'a> {
    pub method: Method,
    pub url: String,
    pub bearer: Option<&'a str>,
    pub api_key: Option<&'a str>,
    pub headers: Vec<(&'a str, &'a str)>,
    pub body: Option<Value>,
}

pub fn post(base: &str, path: &str, body: Value) -> Call<'static> {
    Call {
        method: Method::POST,
        url: format!("{base}{path}"),
        bearer: None,
        api_key: None,
        headers: Vec::new(),
        body: Some(body),
    }
}

pub fn get(base: &str, path: &str) -> Call<'static> {
    Call {
        method: Method::GET,
        url: format!("{base}{path}"),
        bearer: None,
        api_key: None,
        headers: Vec::new(),
        body: None,
    }
}

impl<'a> Call<'a> {
    pub fn bearer(self, token: &'a str) -> Self {
        Self {
            bearer: Some(token),
            ..self
        }
    }

    pub fn api_key(self, key: &'a str) -> Self {
        Self {
            api_key: Some(key),
            ..self
        }
    }

    /// Adds a request header.
    pub fn header(mut self, name: &'a str, value: &'a str) -> Self {
        self.headers.push((name, value));
        self
    }

    /// Sends the request; `Err` is a transport error before any response head.
    pub async fn send(self) -> Result<Reply, String> {
        let mut builder = Request::builder().method(self.method).uri(&self.url);
        if let Some(token) = self.bearer {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        if let Some(key) = self.api_key {
            builder = builder.header("x-api-key", key);
        }
        for (name, value) in &self.headers {
            builder = builder.header(*name, *value);
        }
        let body = match self.body {
            Some(v) => {
                builder = builder.header("content-type", "application/json");
                Bytes::from(v.to_string())
            }
            None => Bytes::new(),
        };
        let request = builder.body(Full::new(body)).unwrap();
        // A fresh client per call: no pooled connection can hide a cut.
        let response = client()
            .request(request)
            .await
            .map_err(|e| format!("{e:?}"))?;
        let (parts, mut body) = response.into_parts();
        let mut received = Vec::new();
        let mut body_error = None;
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => {
                    if let Some(data) = frame.data_ref() {
                        received.extend_from_slice(data);
                    }
                }
                Err(e) => {
                    body_error = Some(format!("{e:?}"));
                    break;
                }
            }
        }
        Ok(Reply {
            status: parts.status,
            headers: parts.headers,
            body: Bytes::from(received),
            body_error,
        })
    }

    /// Sends and expects a complete answer.
    pub async fn ok(self) -> Reply {
        let url = self.url.clone();
        let reply = tokio::time::timeout(Duration::from_secs(10), self.send())
            .await
            .unwrap_or_else(|_| panic!("{url}: timed out"))
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        assert!(reply.body_error.is_none(), "{url}: {:?}", reply.body_error);
        reply
    }
}

pub fn chat(model: &str) -> Value {
    serde_json::json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

pub fn chat_stream(model: &str) -> Value {
    serde_json::json!({"model": model, "stream": true, "messages": [{"role": "user", "content": "hi"}]})
}

/// An Anthropic Messages request body.
pub fn messages(model: &str, stream: bool) -> Value {
    serde_json::json!({"model": model, "max_tokens": 64, "stream": stream,
                       "messages": [{"role": "user", "content": "hi"}]})
}

/// A Gemini `generateContent` request body (the model is in the path).
pub fn gemini() -> Value {
    serde_json::json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
}

/// The JSON `data:` of each SSE event (events without one, and `[DONE]`, are skipped).
pub fn sse_data(reply: &Reply) -> Vec<Value> {
    reply
        .events()
        .iter()
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// The `event:` name of each SSE event.
pub fn sse_names(reply: &Reply) -> Vec<String> {
    reply
        .events()
        .iter()
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("event: ")))
        .map(str::to_owned)
        .collect()
}
