//! Downstream authentication: the key a client presents, and the enabled token it is.

use http::{header, HeaderMap};
use switchyard_engine::Token;
use switchyard_state::unix_ms;

use crate::errors::GatewayError;
use crate::snapshot::View;

/// The key a request presents: `Authorization: Bearer …` (or the bare value), else
/// `x-api-key` / `x-goog-api-key`, else Gemini's `?key=`.
fn presented_key<'a>(headers: &'a HeaderMap, query: Option<&'a str>) -> Option<&'a str> {
    if let Some(v) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let v = v.trim();
        let token = v
            .strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "))
            .unwrap_or(v)
            .trim();
        if !token.is_empty() {
            return Some(token);
        }
    }
    ["x-api-key", "x-goog-api-key"]
        .iter()
        .find_map(|name| {
            headers
                .get(*name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
        })
        .or_else(|| {
            // Gemini clients may send the key as `?key=`.
            query?
                .split('&')
                .find_map(|pair| pair.strip_prefix("key="))
                .filter(|v| !v.is_empty())
        })
}

/// The enabled token of `view` whose key the request presents.
pub fn authenticate<'v>(
    view: &'v View,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Option<&'v Token> {
    view.token(presented_key(headers, query)?)
}

/// A token past its `expires_at` is refused, naming when it expired.
pub fn unexpired(token: &Token) -> Result<(), GatewayError> {
    match token.expires_at.filter(|at| *at <= unix_ms()) {
        Some(at) => Err(GatewayError::TokenExpired {
            at: switchyard_engine::limit::format_rfc3339(at),
        }),
        None => Ok(()),
    }
}
