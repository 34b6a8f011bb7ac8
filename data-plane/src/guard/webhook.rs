//! A `webhook` guardrail's external check: the texts are POSTed as JSON to the rule's URL and
//! its verdict read back, within the rule's timeout.
//!
//! The contract (the book's guardrails guide states it for operators):
//!
//! - request: `POST <url>`, `content-type: application/json`, body
//!   `{"guardrail": "<name>", "stage": "request" | "response", "texts": ["...", ...]}`;
//! - answer: a 2xx with `{"verdict": "allow" | "block", "reason": "..."}` (`reason` optional,
//!   at most [`MAX_ANSWER_BYTES`] in all).
//!
//! Anything else — a timeout, a refused connection, another status (a redirect included: it is
//! never followed), a body too long or not that JSON — is a failure, and the rule's `on_failure`
//! decides (open: allow; closed: block). The texts are never logged.

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request};
use http_body_util::{BodyExt, Full, Limited};
use serde::{Deserialize, Serialize};

use crate::upstream::HttpClient;

/// The longest answer body a webhook may give.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// What the gateway sends a webhook.
#[derive(Serialize)]
struct Asked<'a> {
    guardrail: &'a str,
    stage: &'a str,
    texts: &'a [&'a str],
}

/// What a webhook answers.
#[derive(Deserialize)]
struct Said {
    verdict: String,
}

/// A webhook's verdict, or why there is none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Block,
    /// No verdict: timeout, transport failure, a non-2xx status or an unreadable body (the
    /// reason, a fixed word for the log and metrics).
    Failed(&'static str),
}

/// One call to a webhook: what it is asked and within what time.
pub struct Call<'a> {
    pub url: &'a str,
    pub guardrail: &'a str,
    /// `request` or `response`.
    pub stage: &'a str,
    pub texts: &'a [&'a str],
    pub timeout: Duration,
}

impl Call<'_> {
    /// Asks the webhook, within the timeout (connecting, sending and reading the answer all
    /// count).
    pub async fn ask(&self, client: &HttpClient) -> Verdict {
        match tokio::time::timeout(self.timeout, Box::pin(self.exchange(client))).await {
            Ok(verdict) => verdict,
            Err(_) => Verdict::Failed("timeout"),
        }
    }

    async fn exchange(&self, client: &HttpClient) -> Verdict {
        let asked = Asked {
            guardrail: self.guardrail,
            stage: self.stage,
            texts: self.texts,
        };
        let Ok(body) = serde_json::to_vec(&asked) else {
            return Verdict::Failed("unsendable");
        };
        let Ok(request) = Request::builder()
            .method(Method::POST)
            .uri(self.url)
            .header(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )
            .body(Full::new(Bytes::from(body)))
        else {
            return Verdict::Failed("bad_url");
        };
        let response = match client.request(request).await {
            Ok(response) => response,
            Err(_) => return Verdict::Failed("unreachable"),
        };
        if !response.status().is_success() {
            return Verdict::Failed("status");
        }
        let Ok(collected) = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
        else {
            return Verdict::Failed("body");
        };
        read_verdict(&collected.to_bytes())
    }
}

/// The verdict of a webhook's answer body.
fn read_verdict(body: &[u8]) -> Verdict {
    match serde_json::from_slice::<Said>(body) {
        Ok(said) if said.verdict == "allow" => Verdict::Allow,
        Ok(said) if said.verdict == "block" => Verdict::Block,
        _ => Verdict::Failed("garbage"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_two_verdicts_are_read_anything_else_fails() {
        assert_eq!(read_verdict(br#"{"verdict":"allow"}"#), Verdict::Allow);
        assert_eq!(
            read_verdict(br#"{"verdict":"block","reason":"pii"}"#),
            Verdict::Block
        );
        for garbage in [&b"{}"[..], b"allow", br#"{"verdict":"maybe"}"#, b""] {
            assert_eq!(read_verdict(garbage), Verdict::Failed("garbage"));
        }
    }
}
