//! AWS Bedrock: where a `bedrock` channel's requests go and how they are signed.
//!
//! A `bedrock` channel speaks Anthropic's Messages shape to the rest of the gateway; its
//! requests are converted to Bedrock Runtime's Converse API at the wire
//! ([`switchyard_provider::bedrock`]) and sent to
//!
//! - `POST {base_url}/model/{modelId}/converse` (a plain answer),
//! - `POST {base_url}/model/{modelId}/converse-stream` (the client asked for a stream; the
//!   answer is `application/vnd.amazon.eventstream`),
//! - `POST {base_url}/model/{modelId}/count-tokens` (Anthropic's `count_tokens`),
//!
//! the model id percent-encoded as one path segment (`anthropic.claude-3-5-haiku-20241022-v1:0`
//! becomes `...-v1%3A0`). The `base_url` is the regional endpoint,
//! `https://bedrock-runtime.{region}.amazonaws.com` (or `bedrock-runtime-fips.{region}...`).
//!
//! Every request is signed with AWS Signature Version 4 (`aws-sigv4`, service `bedrock`): the
//! region is the one in the `base_url`'s host, else the credential's `region`, else
//! [`DEFAULT_REGION`]. A credential's secret is a JSON object ([`parse_aws_keys`]):
//!
//! ```json
//! {"access_key_id": "AKIA...", "secret_access_key": "...", "session_token": "...", "region": "us-west-2"}
//! ```
//!
//! (`session_token` and `region` optional). Nothing here logs, formats or returns a secret key,
//! a session token or a signature.

use std::fmt;
use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Method, Request};
use http_body_util::Full;
use serde::Deserialize;
use switchyard_engine::limit::days_from_civil;
use switchyard_provider::bedrock;

use crate::client::path_segment;

/// The SigV4 service name of Bedrock Runtime.
pub const SERVICE: &str = "bedrock";
/// The region of a channel whose base URL names none and whose credential says none.
pub const DEFAULT_REGION: &str = "us-east-1";
/// The content type of `ConverseStream`'s answers.
pub const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

/// A parsed AWS credential. Its `Debug` shows the access key id, never the secret or the token.
#[derive(Clone, PartialEq, Eq)]
pub struct AwsKeys {
    pub access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
    pub region: Option<String>,
}

impl fmt::Debug for AwsKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsKeys")
            .field("access_key_id", &self.access_key_id)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct KeysJson {
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
    session_token: Option<String>,
    region: Option<String>,
}

/// A region name as AWS spells them (`us-east-1`, `eu-central-2`, `us-gov-west-1`): lowercase
/// letters, digits and `-`, 1 to 32 of them.
pub fn valid_region(region: &str) -> bool {
    !region.is_empty()
        && region.len() <= 32
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// A secret that goes into a header or a signature: printable ASCII without spaces.
fn token_chars(value: &str) -> bool {
    value.bytes().all(|b| b.is_ascii_graphic())
}

/// Parses a Bedrock credential's secret: a JSON object with `access_key_id` (16 to 128 letters
/// and digits), `secret_access_key` (1 to 256 printable characters), optional `session_token`
/// (temporary credentials, up to 4,096) and optional `region`. Messages name the field, never
/// quote a value.
pub fn parse_aws_keys(secret: &str) -> Result<AwsKeys, String> {
    let keys: KeysJson = serde_json::from_str(secret.trim()).map_err(|_| {
        "a Bedrock credential is a JSON object {\"access_key_id\": ..., \"secret_access_key\": ..., \"session_token\": ... (optional), \"region\": ... (optional)}".to_owned()
    })?;
    let access_key_id = keys
        .access_key_id
        .filter(|k| !k.is_empty())
        .ok_or("the Bedrock credential has no access_key_id")?;
    if !(16..=128).contains(&access_key_id.len())
        || !access_key_id.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        return Err(
            "the Bedrock credential's access_key_id must be 16 to 128 letters and digits"
                .to_owned(),
        );
    }
    let secret_access_key = keys
        .secret_access_key
        .filter(|k| !k.is_empty())
        .ok_or("the Bedrock credential has no secret_access_key")?;
    if secret_access_key.len() > 256 || !token_chars(&secret_access_key) {
        return Err("the Bedrock credential's secret_access_key must be 1 to 256 printable characters without spaces".to_owned());
    }
    let session_token = keys.session_token.filter(|t| !t.is_empty());
    if let Some(token) = &session_token {
        if token.len() > 4096 || !token_chars(token) {
            return Err("the Bedrock credential's session_token must be at most 4096 printable characters without spaces".to_owned());
        }
    }
    let region = keys.region.filter(|r| !r.is_empty());
    if region.as_deref().is_some_and(|r| !valid_region(r)) {
        return Err(
            "the Bedrock credential's region must be an AWS region name (e.g. us-east-1)"
                .to_owned(),
        );
    }
    Ok(AwsKeys {
        access_key_id,
        secret_access_key,
        session_token,
        region,
    })
}

impl AwsKeys {
    /// Temporary keys a workload identity obtained (the checks of [`parse_aws_keys`], a session
    /// token of up to 16 KiB); `None` when they cannot be used.
    pub fn temporary(
        access_key_id: String,
        secret_access_key: String,
        session_token: String,
        region: Option<String>,
    ) -> Option<AwsKeys> {
        let usable = (16..=128).contains(&access_key_id.len())
            && access_key_id.bytes().all(|b| b.is_ascii_alphanumeric())
            && !secret_access_key.is_empty()
            && secret_access_key.len() <= 256
            && token_chars(&secret_access_key)
            && !session_token.is_empty()
            && session_token.len() <= 16 * 1024
            && token_chars(&session_token);
        usable.then_some(AwsKeys {
            access_key_id,
            secret_access_key,
            session_token: Some(session_token),
            region,
        })
    }

    /// Whether these are temporary keys (signed with `x-amz-security-token`).
    pub fn has_session_token(&self) -> bool {
        self.session_token.is_some()
    }
}

/// Checks a Bedrock credential's secret ([`parse_aws_keys`]).
pub fn check_aws_credential(secret: &str) -> Result<(), String> {
    parse_aws_keys(secret).map(|_| ())
}

/// The region in a Bedrock Runtime endpoint's host (`bedrock-runtime.{region}.amazonaws.com`,
/// `bedrock-runtime-fips.{region}.amazonaws.com`, `.amazonaws.com.cn`), `None` for other hosts.
pub fn region_of_base_url(base: &str) -> Option<String> {
    let uri = base.trim().parse::<http::Uri>().ok()?;
    let host = uri.host()?.to_ascii_lowercase();
    let rest = host
        .strip_prefix("bedrock-runtime-fips.")
        .or_else(|| host.strip_prefix("bedrock-runtime."))?;
    let region = rest
        .strip_suffix(".amazonaws.com")
        .or_else(|| rest.strip_suffix(".amazonaws.com.cn"))?;
    valid_region(region).then(|| region.to_owned())
}

/// Checks a Bedrock channel's `base_url` (already checked as an http(s) URL): an AWS host must
/// be a Bedrock Runtime endpoint (`https://bedrock-runtime.{region}.amazonaws.com`) with no
/// path; any other host (a VPC endpoint, a proxy, a test double) is taken as it is. The message
/// never quotes the URL.
pub fn check_bedrock_base_url(url: &str) -> Result<(), String> {
    let Ok(uri) = url.trim().parse::<http::Uri>() else {
        return Err("must be an http:// or https:// URL with a host".to_owned());
    };
    let host = uri.host().unwrap_or("").to_ascii_lowercase();
    let aws = host.ends_with(".amazonaws.com") || host.ends_with(".amazonaws.com.cn");
    if aws && !host.contains(".vpce.") && region_of_base_url(url).is_none() {
        return Err("a Bedrock base_url on amazonaws.com is the Bedrock Runtime endpoint, https://bedrock-runtime.{region}.amazonaws.com".to_owned());
    }
    if aws && !uri.path().trim_end_matches('/').is_empty() {
        return Err(
            "a Bedrock Runtime base_url has no path (the model path is added to it)".to_owned(),
        );
    }
    Ok(())
}

/// Why a Bedrock request could not be built.
#[derive(Debug)]
pub enum RequestError {
    /// The client's request cannot be said in the Converse API (the feature is named).
    Translate(String),
    /// The path is not one Bedrock serves for this gateway (Messages and token counts only).
    Path,
    /// The URL or a header is not valid HTTP, or the request could not be signed.
    Build(String),
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::Translate(m) => write!(f, "not expressible for Bedrock: {m}"),
            RequestError::Path => f.write_str("Bedrock serves Messages and token counts only"),
            RequestError::Build(m) => write!(f, "bad Bedrock request: {m}"),
        }
    }
}

impl std::error::Error for RequestError {}

/// The signed Bedrock request for an Anthropic Messages request planned at `path`
/// (`/v1/messages` or `/v1/messages/count_tokens`) with `body`: the Converse URL under `base`
/// for `model`, the converted body, `extra` headers (the channel's), signed for `region` with
/// `keys` at `now`.
#[allow(clippy::too_many_arguments)] // each is one fact of the request; a struct would only rename them
pub fn request(
    base: &str,
    path: &str,
    model: &str,
    region: &str,
    keys: &AwsKeys,
    extra: &[(HeaderName, HeaderValue)],
    body: &[u8],
    now: SystemTime,
) -> Result<Request<Full<Bytes>>, RequestError> {
    let translate = |e: switchyard_provider::TranslateError| RequestError::Translate(e.to_string());
    let (operation, body, stream) = match path {
        "/v1/messages" => {
            let (body, stream) = bedrock::converse_request(body).map_err(translate)?;
            let op = if stream {
                "converse-stream"
            } else {
                "converse"
            };
            (op, body, stream)
        }
        "/v1/messages/count_tokens" => (
            "count-tokens",
            bedrock::count_tokens_request(body).map_err(translate)?,
            false,
        ),
        _ => return Err(RequestError::Path),
    };
    let url = format!("{base}/model/{}/{operation}", path_segment(model));
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(&url)
        .body(Full::new(Bytes::new()))
        .map_err(|e| RequestError::Build(e.to_string()))?;
    let headers = request.headers_mut();
    for (name, value) in extra {
        headers.insert(name.clone(), value.clone());
    }
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static(if stream {
            EVENT_STREAM
        } else {
            "application/json"
        }),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    sign_request(&mut request, region, keys, &body, now)?;
    *request.body_mut() = Full::new(Bytes::from(body));
    Ok(request)
}

/// Signs `request` (its URI and headers; `body` is its payload) with SigV4 for Bedrock in
/// `region`: adds `x-amz-date`, `authorization` and, for temporary credentials,
/// `x-amz-security-token`.
pub fn sign_request<B>(
    request: &mut Request<B>,
    region: &str,
    keys: &AwsKeys,
    body: &[u8],
    now: SystemTime,
) -> Result<(), RequestError> {
    let build = |e: &dyn fmt::Display| RequestError::Build(e.to_string());
    let identity: Identity = Credentials::new(
        &keys.access_key_id,
        &keys.secret_access_key,
        keys.session_token.clone(),
        None,
        "switchyard",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SERVICE)
        .time(now)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| build(&e))?
        .into();
    let uri = request.uri().to_string();
    let headers: Vec<(&str, &str)> = request
        .headers()
        .iter()
        .filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?)))
        .collect();
    let signable = SignableRequest::new(
        request.method().as_str(),
        &uri,
        headers.into_iter(),
        SignableBody::Bytes(body),
    )
    .map_err(|e| build(&e))?;
    let (instructions, _) = sign(signable, &params).map_err(|e| build(&e))?.into_parts();
    let (signed, _) = instructions.into_parts();
    for h in signed {
        let mut value = HeaderValue::from_str(h.value()).map_err(|e| build(&e))?;
        value.set_sensitive(h.sensitive() || h.name() == "authorization");
        request.headers_mut().insert(h.name(), value);
    }
    Ok(())
}

/// The parts of a SigV4 `Authorization` header: access key id, date, region, service, signed
/// header names and the signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    pub access_key_id: String,
    pub date: String,
    pub region: String,
    pub service: String,
    pub signed_headers: Vec<String>,
    pub signature: String,
}

/// Parses `AWS4-HMAC-SHA256 Credential=AKID/DATE/REGION/SERVICE/aws4_request,
/// SignedHeaders=a;b, Signature=hex`.
pub fn parse_authorization(value: &str) -> Option<Authorization> {
    let rest = value.strip_prefix("AWS4-HMAC-SHA256 ")?;
    let mut credential = None;
    let mut signed = None;
    let mut signature = None;
    for part in rest.split(',') {
        let (k, v) = part.trim().split_once('=')?;
        match k {
            "Credential" => credential = Some(v),
            "SignedHeaders" => signed = Some(v),
            "Signature" => signature = Some(v),
            _ => {}
        }
    }
    let mut scope = credential?.split('/');
    let access_key_id = scope.next()?.to_owned();
    let date = scope.next()?.to_owned();
    let region = scope.next()?.to_owned();
    let service = scope.next()?.to_owned();
    (scope.next()? == "aws4_request").then_some(())?;
    Some(Authorization {
        access_key_id,
        date,
        region,
        service,
        signed_headers: signed?.split(';').map(str::to_owned).collect(),
        signature: signature?.to_owned(),
    })
}

/// `x-amz-date` (`20261203T052000Z`) as a time.
pub fn parse_amz_date(value: &str) -> Option<SystemTime> {
    let b = value.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| value.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hh, mm, ss) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let days = days_from_civil(y, m, d);
    let secs = u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()?;
    Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(token: Option<&str>) -> AwsKeys {
        let mut v = serde_json::json!({
            "access_key_id": "AKIDEXAMPLE00000",
            "secret_access_key": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        });
        if let Some(t) = token {
            v["session_token"] = t.into();
        }
        parse_aws_keys(&v.to_string()).unwrap()
    }

    #[test]
    fn credentials_are_checked_without_quoting_them() {
        let k = keys(Some("FwoGZXIvYXdzEXAMPLE"));
        assert_eq!(k.access_key_id, "AKIDEXAMPLE00000");
        let debug = format!("{k:?}");
        assert!(
            !debug.contains("wJalr") && !debug.contains("FwoG"),
            "{debug}"
        );
        for bad in [
            "AKID:SECRET",
            r#"{"secret_access_key":"SECRETX"}"#,
            r#"{"access_key_id":"short","secret_access_key":"SECRETX"}"#,
            r#"{"access_key_id":"AKIDEXAMPLE00000"}"#,
            r#"{"access_key_id":"AKIDEXAMPLE00000","secret_access_key":"SECRET X"}"#,
            r#"{"access_key_id":"AKIDEXAMPLE00000","secret_access_key":"SECRETX","region":"US East"}"#,
        ] {
            let e = check_aws_credential(bad).unwrap_err();
            assert!(!e.contains("SECRET"), "{e}");
        }
    }

    #[test]
    fn regions_and_base_urls() {
        assert_eq!(
            region_of_base_url("https://bedrock-runtime.eu-west-3.amazonaws.com").as_deref(),
            Some("eu-west-3")
        );
        assert_eq!(
            region_of_base_url("https://bedrock-runtime-fips.us-gov-west-1.amazonaws.com/")
                .as_deref(),
            Some("us-gov-west-1")
        );
        assert_eq!(region_of_base_url("http://127.0.0.1:9"), None);
        assert!(check_bedrock_base_url("https://bedrock-runtime.us-east-1.amazonaws.com").is_ok());
        assert!(check_bedrock_base_url("http://127.0.0.1:9/bedrock").is_ok());
        assert!(check_bedrock_base_url("https://bedrock.us-east-1.amazonaws.com").is_err());
        assert!(
            check_bedrock_base_url("https://bedrock-runtime.us-east-1.amazonaws.com/model")
                .is_err()
        );
    }

    #[test]
    fn requests_go_to_the_converse_paths_signed() {
        let now = parse_amz_date("20261203T052000Z").unwrap();
        let body = br#"{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
        let r = request(
            "https://bedrock-runtime.us-west-2.amazonaws.com",
            "/v1/messages",
            "anthropic.claude-3-5-haiku-20241022-v1:0",
            "us-west-2",
            &keys(Some("TOKEN123")),
            &[],
            body,
            now,
        )
        .unwrap();
        assert_eq!(
            r.uri().to_string(),
            "https://bedrock-runtime.us-west-2.amazonaws.com/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream"
        );
        assert_eq!(r.headers()["accept"], EVENT_STREAM);
        assert_eq!(r.headers()["x-amz-date"], "20261203T052000Z");
        assert_eq!(r.headers()["x-amz-security-token"], "TOKEN123");
        let auth = r.headers()["authorization"].to_str().unwrap();
        assert!(r.headers()["authorization"].is_sensitive());
        let parsed = parse_authorization(auth).unwrap();
        assert_eq!(parsed.access_key_id, "AKIDEXAMPLE00000");
        assert_eq!(
            (
                parsed.date.as_str(),
                parsed.region.as_str(),
                parsed.service.as_str()
            ),
            ("20261203", "us-west-2", "bedrock")
        );
        assert!(parsed.signed_headers.contains(&"host".to_owned()));
        assert!(parsed
            .signed_headers
            .contains(&"x-amz-security-token".to_owned()));
        assert_eq!(parsed.signature.len(), 64);
        assert!(!auth.contains("wJalr"));
        let count = request(
            "http://127.0.0.1:9",
            "/v1/messages/count_tokens",
            "m",
            DEFAULT_REGION,
            &keys(None),
            &[],
            br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
            now,
        )
        .unwrap();
        assert_eq!(count.uri().path(), "/model/m/count-tokens");
        assert!(!count.headers().contains_key("x-amz-security-token"));
        assert!(matches!(
            request(
                "http://x",
                "/v1/models",
                "m",
                "us-east-1",
                &keys(None),
                &[],
                b"{}",
                now
            ),
            Err(RequestError::Path)
        ));
    }

    #[test]
    fn amz_dates_parse() {
        let t = parse_amz_date("19700102T000001Z").unwrap();
        assert_eq!(
            t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(),
            86_401
        );
        let t = parse_amz_date("20240229T120000Z").unwrap();
        assert_eq!(
            t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(),
            1_709_208_000
        );
        assert!(parse_amz_date("2024-02-29").is_none());
    }

    #[test]
    fn amz_dates_hold_every_field_to_its_range() {
        let secs = |v: &str| {
            parse_amz_date(v).map(|t| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs())
        };
        // The last valid value of each field, and a leap second.
        assert_eq!(secs("19701231T235960Z"), Some(364 * 86_400 + 86_400));
        assert_eq!(secs("19700131T000000Z"), Some(30 * 86_400));
        assert_eq!(secs("19700101T230000Z"), Some(23 * 3600));
        assert_eq!(secs("19700101T005900Z"), Some(59 * 60));
        for bad in [
            "19700101T000000",   // 15 bytes
            "19700101T000000ZZ", // 17 bytes
            "19700101X000000Z",  // no T
            "19700101T000000X",  // no Z
            "19700001T000000Z",  // month 0
            "19701301T000000Z",  // month 13
            "19700100T000000Z",  // day 0
            "19700132T000000Z",  // day 32
            "19700101T240000Z",  // hour 24
            "19700101T006000Z",  // minute 60
            "19700101T000061Z",  // second 61
            "1970010aT000000Z",  // not a number
        ] {
            assert_eq!(secs(bad), None, "{bad}");
        }
    }

    #[test]
    fn credential_fields_are_held_to_their_lengths_and_characters() {
        let with = |secret: &str, token: Option<&str>| {
            let mut v = serde_json::json!({"access_key_id": "AKIDEXAMPLE00000", "secret_access_key": secret});
            if let Some(t) = token {
                v["session_token"] = t.into();
            }
            parse_aws_keys(&v.to_string())
        };
        assert!(with(&"s".repeat(256), None).is_ok());
        assert!(with(&"s".repeat(257), None).is_err());
        assert!(with("s", Some(&"t".repeat(4096))).is_ok());
        assert!(with("s", Some(&"t".repeat(4097))).is_err());
        // A short token with a space is refused as well.
        assert!(with("s", Some("t t")).is_err());
        // `Debug` names the key id and the region, nothing secret.
        let k = parse_aws_keys(
            r#"{"access_key_id":"AKIDEXAMPLE00000","secret_access_key":"s3cr3t","region":"eu-west-3"}"#,
        )
        .unwrap();
        let debug = format!("{k:?}");
        assert!(
            debug.contains("AKIDEXAMPLE00000") && debug.contains("eu-west-3"),
            "{debug}"
        );
        assert!(!debug.contains("s3cr3t"), "{debug}");
    }

    #[test]
    fn request_errors_say_what_failed() {
        assert_eq!(
            RequestError::Translate("image URLs".into()).to_string(),
            "not expressible for Bedrock: image URLs"
        );
        assert_eq!(
            RequestError::Path.to_string(),
            "Bedrock serves Messages and token counts only"
        );
        assert_eq!(
            RequestError::Build("no host".into()).to_string(),
            "bad Bedrock request: no host"
        );
    }
}
