//! AWS workload identity, for `bedrock` channels, as AWS's SDKs find it:
//!
//! - **web identity** (EKS IAM roles for service accounts): `AWS_WEB_IDENTITY_TOKEN_FILE`,
//!   `AWS_ROLE_ARN`, optional `AWS_ROLE_SESSION_NAME` (else `switchyard`). The file's token
//!   (read at each exchange: the kubelet rotates it) is exchanged at STS's
//!   `AssumeRoleWithWebIdentity` (an unsigned form POST) at `AWS_ENDPOINT_URL_STS`, else
//!   `AWS_ENDPOINT_URL`, else `https://sts.{AWS_REGION}.amazonaws.com` (or `sts.amazonaws.com`
//!   without a region); its XML answer is read within the size bound;
//! - **EKS Pod Identity** (container credentials): `AWS_CONTAINER_CREDENTIALS_FULL_URI`, asked
//!   with the token of `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` (or
//!   `AWS_CONTAINER_AUTHORIZATION_TOKEN`) in `Authorization`; a JSON answer.
//!
//! Either gives temporary keys with a session token and an expiry; requests are signed with them
//! (SigV4, `x-amz-security-token`) in the base URL's region, else `AWS_REGION` /
//! `AWS_DEFAULT_REGION`, else the default.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request};
use http_body_util::Full;
use serde_json::Value;
use tokio::time::Instant;

use super::io::{lifetime_until, read_file, refused, var};
use crate::bedrock::AwsKeys;
use crate::client::HttpClient;
use crate::token::{
    bounded_words, fetch, form, form_post, Fresh, Registry, TokenCache, TokenError,
};

/// The session name when `AWS_ROLE_SESSION_NAME` gives none.
pub const DEFAULT_SESSION_NAME: &str = "switchyard";
/// The lifetime asked of STS (its default).
const SESSION_SECONDS: &str = "3600";
/// The lifetime of keys whose expiry cannot be read.
const UNKNOWN_LIFETIME: Duration = Duration::from_secs(900);

/// Where the temporary keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    WebIdentity {
        token_file: PathBuf,
        role_arn: String,
        session_name: String,
        sts_url: String,
    },
    Container {
        url: String,
        token_file: Option<PathBuf>,
        token: Option<String>,
    },
}

/// One AWS workload identity and its temporary keys.
pub struct AwsIdentity {
    source: Source,
    region: Option<String>,
    keys: TokenCache<Arc<AwsKeys>>,
}

fn identities() -> &'static Registry<AwsIdentity> {
    static IDENTITIES: OnceLock<Registry<AwsIdentity>> = OnceLock::new();
    IDENTITIES.get_or_init(Registry::default)
}

/// The AWS identity of this environment: this process's, when one for the same settings is
/// alive, else a new one.
pub fn identity(env: &dyn Fn(&str) -> Option<String>) -> Result<Arc<AwsIdentity>, String> {
    let region = var(env, "AWS_REGION")
        .or_else(|| var(env, "AWS_DEFAULT_REGION"))
        .filter(|r| crate::bedrock::valid_region(r));
    let source = match (
        var(env, "AWS_WEB_IDENTITY_TOKEN_FILE"),
        var(env, "AWS_ROLE_ARN"),
        var(env, "AWS_CONTAINER_CREDENTIALS_FULL_URI"),
    ) {
        (Some(token_file), Some(role_arn), _) => Source::WebIdentity {
            token_file: PathBuf::from(token_file),
            role_arn,
            session_name: var(env, "AWS_ROLE_SESSION_NAME")
                .unwrap_or_else(|| DEFAULT_SESSION_NAME.to_owned()),
            sts_url: var(env, "AWS_ENDPOINT_URL_STS")
                .or_else(|| var(env, "AWS_ENDPOINT_URL"))
                .unwrap_or_else(|| match &region {
                    Some(region) => format!("https://sts.{region}.amazonaws.com"),
                    None => "https://sts.amazonaws.com".to_owned(),
                }),
        },
        (_, _, Some(url)) => Source::Container {
            url,
            token_file: var(env, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE").map(PathBuf::from),
            token: var(env, "AWS_CONTAINER_AUTHORIZATION_TOKEN"),
        },
        _ => return Err("no AWS workload identity in this process's environment (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN, or AWS_CONTAINER_CREDENTIALS_FULL_URI)".to_owned()),
    };
    let (Source::WebIdentity { sts_url: url, .. } | Source::Container { url, .. }) = &source;
    crate::checks::check_base_url(url).map_err(|m| format!("the AWS identity endpoint {m}"))?;
    // The key tells identities apart (it is never logged).
    let key = format!("{source:?}|{region:?}");
    identities().get_or_make(&key, || {
        Ok(AwsIdentity {
            keys: TokenCache::new(describe(&source)),
            source,
            region,
        })
    })
}

/// The kind and the role, never a token.
fn describe(source: &Source) -> String {
    match source {
        Source::WebIdentity { role_arn, .. } => format!("AWS web identity for role {role_arn}"),
        Source::Container { .. } => "AWS container credentials (EKS Pod Identity)".to_owned(),
    }
}

impl AwsIdentity {
    /// The kind and the role, never a token.
    pub fn describe(&self) -> String {
        self.keys.label().to_owned()
    }

    pub fn region(&self) -> Option<&str> {
        self.region.as_deref()
    }

    pub fn forget(&self) {
        self.keys.set(None);
    }

    /// The current temporary keys, or new ones within `budget`.
    pub async fn keys(
        &self,
        client: &HttpClient,
        budget: Duration,
    ) -> Result<Arc<AwsKeys>, TokenError> {
        self.keys.get(budget, || self.fetch(client)).await
    }

    async fn fetch(&self, client: &HttpClient) -> Result<Fresh<Arc<AwsKeys>>, TokenError> {
        let started = Instant::now();
        let (keys, lifetime) = match &self.source {
            Source::WebIdentity {
                token_file,
                role_arn,
                session_name,
                sts_url,
            } => {
                let token = read_file(token_file)?;
                let body = form(&[
                    ("Action", "AssumeRoleWithWebIdentity"),
                    ("Version", "2011-06-15"),
                    ("RoleArn", role_arn),
                    ("RoleSessionName", session_name),
                    ("DurationSeconds", SESSION_SECONDS),
                    ("WebIdentityToken", &token),
                ]);
                // STS answers in XML.
                let request = form_post(sts_url, body, "text/xml")?;
                let answer = fetch(client, request).await?;
                if !answer.status.is_success() {
                    let reason = sts_error(&answer.body, &token);
                    tracing::warn!(identity = %self.describe(), status = answer.status.as_u16(), reason = %reason, "STS refused the web identity");
                    return Err(refused(&answer, reason));
                }
                sts_keys(&answer.body, self.region.clone())?
            }
            Source::Container {
                url,
                token_file,
                token,
            } => {
                let token = match (token_file, token) {
                    (Some(file), _) => Some(read_file(file)?),
                    (None, token) => token.clone(),
                };
                let mut request = Request::builder()
                    .method(Method::GET)
                    .uri(url.as_str())
                    .header(header::ACCEPT, HeaderValue::from_static("application/json"));
                if let Some(token) = &token {
                    let mut value =
                        HeaderValue::from_str(token).map_err(|_| TokenError::Request)?;
                    value.set_sensitive(true);
                    request = request.header(header::AUTHORIZATION, value);
                }
                let request = request
                    .body(Full::new(Bytes::new()))
                    .map_err(|_| TokenError::Request)?;
                let answer = fetch(client, request).await?;
                if !answer.status.is_success() {
                    let reason = container_error(&answer.body, token.as_deref().unwrap_or(""));
                    tracing::warn!(identity = %self.describe(), status = answer.status.as_u16(), reason = %reason, "the container credentials endpoint refused");
                    return Err(refused(&answer, reason));
                }
                container_keys(&answer.body, self.region.clone())?
            }
        };
        tracing::debug!(identity = %self.describe(), lifetime_s = lifetime.as_secs(), "AWS temporary keys obtained");
        Ok(Fresh::new(Arc::new(keys), started, lifetime))
    }
}

/// The text of the first `<tag>...</tag>` in `xml`, its five predefined entities decoded.
fn xml_text(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&close)?;
    let raw = xml[start..end].trim();
    Some(
        raw.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&"),
    )
}

/// Temporary keys from an answer whose `field` gives `AccessKeyId`, `SecretAccessKey`, the
/// session token (named `token`) and `Expiration`, and how long they live.
fn temporary_keys(
    field: impl Fn(&str) -> Option<String>,
    token: &str,
    region: Option<String>,
) -> Result<(AwsKeys, Duration), TokenError> {
    let required = |name: &str| field(name).ok_or(TokenError::Malformed);
    let keys = AwsKeys::temporary(
        required("AccessKeyId")?,
        required("SecretAccessKey")?,
        required(token)?,
        region,
    )
    .ok_or(TokenError::Malformed)?;
    let lifetime = field("Expiration")
        .and_then(|e| lifetime_until(&e))
        .unwrap_or(UNKNOWN_LIFETIME);
    Ok((keys, lifetime))
}

/// An error answer's words, `code: message` (either alone when only one is given), bounded,
/// `secret` never quoted.
fn error_words(code: Option<String>, message: Option<String>, secret: &str) -> String {
    let words = match (code, message) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (code, message) => code.or(message).unwrap_or_default(),
    };
    bounded_words(&words, secret)
}

/// The keys of an `AssumeRoleWithWebIdentity` answer and how long they live.
fn sts_keys(body: &[u8], region: Option<String>) -> Result<(AwsKeys, Duration), TokenError> {
    let xml = std::str::from_utf8(body).map_err(|_| TokenError::Malformed)?;
    let credentials = xml_text(xml, "Credentials").ok_or(TokenError::Malformed)?;
    temporary_keys(|tag| xml_text(&credentials, tag), "SessionToken", region)
}

/// STS's `<Code>: <Message>`, bounded, the web identity token never quoted.
fn sts_error(body: &[u8], token: &str) -> String {
    let xml = String::from_utf8_lossy(body);
    error_words(xml_text(&xml, "Code"), xml_text(&xml, "Message"), token)
}

/// The keys of a container credentials answer (`AccessKeyId`, `SecretAccessKey`, `Token`,
/// `Expiration`) and how long they live.
fn container_keys(body: &[u8], region: Option<String>) -> Result<(AwsKeys, Duration), TokenError> {
    let answer: Value = serde_json::from_slice(body).map_err(|_| TokenError::Malformed)?;
    let field = |name: &str| answer.get(name).and_then(Value::as_str).map(str::to_owned);
    temporary_keys(field, "Token", region)
}

/// A container credentials endpoint's `code: message`, bounded, its token never quoted.
fn container_error(body: &[u8], token: &str) -> String {
    let Ok(answer) = serde_json::from_slice::<Value>(body) else {
        return String::new();
    };
    let text = |name: &str| answer.get(name).and_then(Value::as_str).map(str::to_owned);
    error_words(
        text("code").or(text("Code")),
        text("message").or(text("Message")),
        token,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vertex::TestTokenEndpoint;
    use http::StatusCode;

    const STS_ANSWER: &str = r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <Credentials>
      <AccessKeyId>ASIATESTTESTTESTTEST</AccessKeyId>
      <SecretAccessKey>secret/key+a&amp;b</SecretAccessKey>
      <SessionToken>SESSION-TOKEN</SessionToken>
      <Expiration>2099-01-01T00:00:00Z</Expiration>
    </Credentials>
  </AssumeRoleWithWebIdentityResult>
</AssumeRoleWithWebIdentityResponse>"#;

    fn xml(status: u16, body: &str) -> Option<Vec<u8>> {
        Some(
            format!(
                "HTTP/1.1 {status} X\r\ncontent-type: text/xml\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )
    }

    fn token_file(name: &str, text: &str) -> PathBuf {
        let path =
            std::env::temp_dir().join(format!("switchyard-aws-{name}-{}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    }

    fn web_identity(
        endpoint: &TestTokenEndpoint,
        file: &std::path::Path,
        role: &str,
    ) -> Arc<AwsIdentity> {
        let vars = [
            ("AWS_WEB_IDENTITY_TOKEN_FILE", file.display().to_string()),
            ("AWS_ROLE_ARN", role.to_owned()),
            ("AWS_ENDPOINT_URL_STS", endpoint.url.clone()),
            ("AWS_REGION", "eu-west-3".to_owned()),
        ];
        identity(&|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
        })
        .unwrap()
    }

    #[tokio::test]
    async fn a_web_identity_token_is_exchanged_for_temporary_keys() {
        let endpoint =
            TestTokenEndpoint::start(|_, _| (Duration::ZERO, xml(200, STS_ANSWER))).await;
        let file = token_file("exchange", "eyJ.web.identity\n");
        let identity = web_identity(&endpoint, &file, "arn:aws:iam::123456789012:role/gateway");
        let client = crate::client::build_client(Duration::from_secs(5));
        let keys = identity
            .keys(&client, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(keys.access_key_id, "ASIATESTTESTTESTTEST");
        assert_eq!(keys.region.as_deref(), Some("eu-west-3"));
        assert!(keys.has_session_token());
        let debug = format!("{keys:?}");
        assert!(
            !debug.contains("SESSION-TOKEN") && !debug.contains("secret/key"),
            "{debug}"
        );
        // Cached: one exchange.
        identity
            .keys(&client, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(endpoint.served(), 1);
        let (head, form) = endpoint.requests.lock().unwrap()[0].clone();
        assert!(head
            .to_ascii_lowercase()
            .contains("content-type: application/x-www-form-urlencoded"));
        assert!(form.contains("Action=AssumeRoleWithWebIdentity"), "{form}");
        assert!(
            form.contains("RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fgateway"),
            "{form}"
        );
        assert!(form.contains("RoleSessionName=switchyard"), "{form}");
        assert!(
            form.contains("WebIdentityToken=eyJ.web.identity&")
                || form.ends_with("WebIdentityToken=eyJ.web.identity"),
            "{form}"
        );
        assert!(identity.describe().contains("role/gateway"));
    }

    #[tokio::test]
    async fn sts_refusals_and_garbage_are_told_apart_and_quote_no_token() {
        let endpoint = TestTokenEndpoint::start(|n, _| {
            let answer = match n {
                1 => xml(403, "<ErrorResponse><Error><Code>AccessDenied</Code><Message>Not authorized with TOKEN-IN-FILE</Message></Error></ErrorResponse>"),
                2 => xml(200, "<html>garbage</html>"),
                _ => xml(200, &STS_ANSWER.replace("ASIATESTTESTTESTTEST", "short")),
            };
            (Duration::ZERO, answer)
        })
        .await;
        let file = token_file("refused", "TOKEN-IN-FILE");
        let identity = web_identity(&endpoint, &file, "arn:aws:iam::1:role/refused");
        let client = crate::client::build_client(Duration::from_secs(5));
        let refused = identity
            .keys(&client, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(
            refused,
            TokenError::Refused {
                status: StatusCode::FORBIDDEN,
                retry_after: None,
                reason: "AccessDenied: Not authorized with [secret]".into()
            }
        );
        assert_eq!(
            identity
                .keys(&client, Duration::from_secs(5))
                .await
                .unwrap_err(),
            TokenError::Malformed
        );
        assert_eq!(
            identity
                .keys(&client, Duration::from_secs(5))
                .await
                .unwrap_err(),
            TokenError::Malformed
        );
        // An unreadable token file: nothing is asked.
        std::fs::remove_file(&file).unwrap();
        assert_eq!(
            identity
                .keys(&client, Duration::from_secs(5))
                .await
                .unwrap_err(),
            TokenError::Request
        );
        assert_eq!(endpoint.served(), 3);
    }

    #[tokio::test]
    async fn pod_identity_asks_with_its_token_and_reads_json() {
        let endpoint = TestTokenEndpoint::start(|_, _| {
            let body = r#"{"AccessKeyId":"ASIAPODPODPODPODPOD1","SecretAccessKey":"s","Token":"T","Expiration":"2099-01-01T00:00:00Z"}"#;
            (Duration::ZERO, TestTokenEndpoint::json(200, "", body))
        })
        .await;
        let file = token_file("pod", "pod-auth-token");
        let vars = [
            ("AWS_CONTAINER_CREDENTIALS_FULL_URI", endpoint.url.clone()),
            (
                "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                file.display().to_string(),
            ),
        ];
        let identity = identity(&|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
        })
        .unwrap();
        let client = crate::client::build_client(Duration::from_secs(5));
        let keys = identity
            .keys(&client, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(keys.access_key_id, "ASIAPODPODPODPODPOD1");
        let (head, _) = endpoint.requests.lock().unwrap()[0].clone();
        assert!(head.starts_with("GET /token"), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("authorization: pod-auth-token"),
            "{head}"
        );
    }

    #[test]
    fn no_aws_identity_names_the_variables() {
        let message = identity(&|_| None).err().unwrap();
        assert!(message.contains("AWS_WEB_IDENTITY_TOKEN_FILE"), "{message}");
    }
}
