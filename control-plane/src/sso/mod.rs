//! Single sign-on with OpenID Connect: people sign in to the console through the organisation's
//! identity provider (authorization code flow with PKCE), and automations may call the admin API
//! with a JWT the provider issued. Off unless `SWITCHYARD_SSO_ISSUER` is set.
//!
//! The parts, bottom up: `settings.rs` (flags and their validation), `roles.rs` (groups to a
//! role), `jwt.rs` (checking a token, pure), `login.rs` (a sign-in in progress, in a signed
//! cookie), `issuer.rs` (discovery, signing keys and the code exchange over HTTP) and `store.rs`
//! (sessions in Postgres), over `person.rs` (who signed in, with which role). This module ties them: [`Sso`] begins and finishes a sign-in and
//! checks a bearer token, each ending in a [`Person`] with a role; the admin API's access layer
//! turns that into the caller's identity.

pub mod issuer;
pub mod jwt;
pub mod login;
pub mod person;
pub mod roles;
pub mod settings;
pub mod store;

use std::sync::Arc;

use http::HeaderMap;
use serde::Deserialize;
use serde_json::{Map, Value};
use sqlx::PgPool;
use switchyard_upstream::HttpClient;

use crate::error::{ApiError, ApiResult};
use issuer::Issuer;
use login::Pending;
use person::Person;
use roles::Grant;
use settings::SsoSettings;

/// The cookie holding a console session's secret.
pub const SESSION_COOKIE: &str = "switchyard-session";

/// The header a write made with the session cookie carries the session's CSRF token in.
pub const CSRF_HEADER: &str = "x-switchyard-csrf";

/// What the provider sends the browser back to the callback with.
#[derive(Debug, Default, Deserialize)]
pub struct Callback {
    pub code: Option<String>,
    pub state: Option<String>,
    pub error: Option<String>,
    pub error_description: Option<String>,
    /// The issuer, from providers that say it (RFC 9207): it must be the configured one.
    pub iss: Option<String>,
}

pub struct Sso {
    pub settings: Arc<SsoSettings>,
    issuer: Issuer,
    login_key: [u8; 32],
}

/// This clock, in Unix seconds (what token claims are compared with).
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// A bearer credential shaped as a JWT (three base64url parts); admin tokens never are.
pub fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3 && token.starts_with("ey")
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.trim())
        .filter(|value| !value.is_empty())
}

fn unavailable(error: issuer::IssuerError) -> ApiError {
    tracing::warn!(error = %error, "identity provider unavailable");
    ApiError::Unavailable {
        message: format!("single sign-on is unavailable: {error}"),
    }
}

fn failed(message: impl Into<String>) -> ApiError {
    ApiError::SignInFailed {
        message: message.into(),
    }
}

impl Sso {
    pub fn new(settings: SsoSettings, client: HttpClient, admin_token: &str) -> Sso {
        let settings = Arc::new(settings);
        Sso {
            issuer: Issuer::new(Arc::clone(&settings), client),
            settings,
            login_key: login::login_key(admin_token),
        }
    }

    /// Starts a sign-in: the provider's authorization URL to send the browser to, and the value
    /// of the cookie that carries the sign-in to the callback.
    pub async fn begin(&self, now: i64) -> ApiResult<(String, String)> {
        let discovery = self.issuer.discovery().await.map_err(unavailable)?;
        let pending = Pending::new(now)
            .map_err(|e| ApiError::Internal(anyhow::anyhow!("no system randomness: {e}")))?;
        let url = pending.authorization_url(&discovery.authorization_endpoint, &self.settings);
        Ok((url, pending.cookie_value(&self.login_key)))
    }

    /// Finishes a sign-in at the callback: the state matches the browser's cookie, the code is
    /// exchanged (with the PKCE verifier), the ID token holds every rule and the nonce sent, and
    /// the person's groups map to a role.
    pub async fn finish(
        &self,
        pool: &PgPool,
        callback: &Callback,
        cookie: Option<&str>,
        now: i64,
    ) -> ApiResult<Person> {
        if let Some(error) = &callback.error {
            let detail = callback.error_description.as_deref().unwrap_or_default();
            return Err(failed(format!(
                "the identity provider did not sign you in: {} {}",
                crate::error::bounded(error, 64),
                crate::error::bounded(detail, 256)
            )));
        }
        let pending = cookie
            .and_then(|value| Pending::from_cookie(value, &self.login_key, now))
            .ok_or_else(|| {
                failed("this sign-in was not started in this browser, or took longer than 10 minutes; sign in again")
            })?;
        if callback.state.as_deref() != Some(pending.state.as_str()) {
            return Err(failed(
                "the sign-in's state does not match this browser's; sign in again",
            ));
        }
        if callback
            .iss
            .as_deref()
            .is_some_and(|iss| iss != self.settings.issuer)
        {
            return Err(failed("the callback names another issuer"));
        }
        let code = callback
            .code
            .as_deref()
            .filter(|c| !c.is_empty())
            .ok_or_else(|| failed("the callback carries no authorization code"))?;
        let id_token = self
            .issuer
            .exchange(code, &pending.verifier)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let audiences = [self.settings.client_id.clone()];
        let claims = self
            .verified(&id_token, Some(&pending.nonce), &audiences, now)
            .await?;
        self.person(pool, &claims).await
    }

    /// The person a bearer JWT (an ID or access token of the provider) stands for, and when the
    /// token expires (Unix seconds).
    pub async fn bearer(&self, pool: &PgPool, token: &str, now: i64) -> ApiResult<(Person, i64)> {
        let claims = self
            .verified(token, None, &self.settings.audiences, now)
            .await?;
        let exp = claims.get("exp").and_then(Value::as_i64).unwrap_or(now);
        Ok((self.person(pool, &claims).await?, exp))
    }

    async fn verified(
        &self,
        token: &str,
        nonce: Option<&str>,
        audiences: &[String],
        now: i64,
    ) -> ApiResult<Map<String, Value>> {
        let refused = |refusal: jwt::Refusal| ApiError::TokenRefused {
            message: refusal.to_string(),
        };
        let (_, kid) = jwt::header(token).map_err(refused)?;
        let keys = self
            .issuer
            .keys(kid.as_deref())
            .await
            .map_err(unavailable)?;
        let expect = jwt::Expect {
            issuer: &self.settings.issuer,
            audiences,
            client_id: &self.settings.client_id,
            nonce,
        };
        jwt::verify(token, &keys, &expect, now).map_err(refused)
    }

    /// The role the token's groups grant; a person without one is refused with a message saying
    /// who signed in and what to ask for.
    async fn person(&self, pool: &PgPool, claims: &Map<String, Value>) -> ApiResult<Person> {
        let text = |name: &str| {
            claims
                .get(name)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let subject = text("sub").unwrap_or_default();
        let name = text("email").unwrap_or(subject);
        if subject.chars().count() > 255 || name.chars().count() > 320 {
            return Err(ApiError::TokenRefused {
                message: "the token's sub or email claim is too long".into(),
            });
        }
        let groups = roles::groups_in(claims, &self.settings.groups_claim);
        let no_role = |why: String| ApiError::NoMappedRole {
            message: format!(
                "{name} is signed in, but {why}; an administrator can map one of their groups to a \
                 role in SWITCHYARD_SSO_ROLES"
            ),
        };
        let (role, team) = match self.settings.roles.grant(&groups) {
            None => {
                let claim = self.settings.groups_claim.join(".");
                return Err(no_role(format!(
                    "none of their groups (claim {claim:?}) has a role here"
                )));
            }
            Some(Grant::Fleet(role)) => (role, None),
            Some(Grant::Team { role, team }) => match store::team_id(pool, &team).await? {
                Some(id) => (role, Some(id)),
                None => {
                    return Err(no_role(format!(
                        "the team {team:?} their group maps to does not exist"
                    )))
                }
            },
        };
        Ok(Person {
            subject: subject.to_owned(),
            name: name.to_owned(),
            role,
            team,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_by_exact_name_across_headers() {
        let mut headers = HeaderMap::new();
        headers.append("cookie", "a=1; switchyard-session_x=no".parse().unwrap());
        headers.append("cookie", "switchyard-session=yes; b=2".parse().unwrap());
        assert_eq!(cookie(&headers, SESSION_COOKIE), Some("yes"));
        assert_eq!(cookie(&headers, "b"), Some("2"));
        assert_eq!(cookie(&headers, "c"), None);
    }

    #[test]
    fn only_jwt_shaped_bearers_are_taken_for_tokens_of_the_provider() {
        assert!(looks_like_jwt("eyJhbGciOi.eyJzdWIi.c2ln"));
        assert!(!looks_like_jwt("sy-admin-0123456789abcdef"));
        assert!(!looks_like_jwt("a.b.c"));
    }
}
