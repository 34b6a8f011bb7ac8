//! One sign-in in progress: its `state`, `nonce` and PKCE verifier, carried between the login
//! redirect and the callback in a cookie that only this browser holds and that the control
//! plane's key signs (HMAC-SHA256), so no replica needs to remember it and a browser cannot
//! finish a sign-in another one started. The callback's `state` must be the cookie's.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use super::settings::SsoSettings;

/// Seconds a sign-in may take, from the redirect to the provider to the callback.
pub const LOGIN_TTL_SECS: i64 = 600;

/// The cookie carrying a sign-in in progress (sent to the callback only).
pub const LOGIN_COOKIE: &str = "switchyard-sso-login";

/// Base64url of 32 random bytes: a state, a nonce, a verifier or a session secret.
pub fn random_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub state: String,
    pub nonce: String,
    pub verifier: String,
    /// Unix seconds after which the callback refuses it.
    pub expires: i64,
}

impl Pending {
    pub fn new(now: i64) -> Result<Pending, getrandom::Error> {
        Ok(Pending {
            state: random_token()?,
            nonce: random_token()?,
            verifier: random_token()?,
            expires: now + LOGIN_TTL_SECS,
        })
    }

    /// The PKCE challenge (S256) of the verifier.
    pub fn challenge(&self) -> String {
        URL_SAFE_NO_PAD.encode(Sha256::digest(self.verifier.as_bytes()))
    }

    fn signed_part(&self) -> String {
        format!(
            "{}.{}.{}.{}",
            self.state, self.nonce, self.verifier, self.expires
        )
    }

    /// The cookie's value: the parts and their MAC under `key`.
    pub fn cookie_value(&self, key: &[u8; 32]) -> String {
        let part = self.signed_part();
        format!("{part}.{}", URL_SAFE_NO_PAD.encode(mac(key, &part)))
    }

    /// The sign-in a cookie carries, if `key` signed it and it has not expired.
    pub fn from_cookie(value: &str, key: &[u8; 32], now: i64) -> Option<Pending> {
        let (part, tag) = value.rsplit_once('.')?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        let mut check = Hmac::<Sha256>::new_from_slice(key).ok()?;
        check.update(part.as_bytes());
        check.verify_slice(&tag).ok()?;
        let mut parts = part.split('.');
        let pending = Pending {
            state: parts.next()?.to_owned(),
            nonce: parts.next()?.to_owned(),
            verifier: parts.next()?.to_owned(),
            expires: parts.next()?.parse().ok()?,
        };
        (parts.next().is_none() && now < pending.expires).then_some(pending)
    }

    /// Where the browser goes to sign in.
    pub fn authorization_url(&self, endpoint: &str, settings: &SsoSettings) -> String {
        let query = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("response_type", "code")
            .append_pair("client_id", &settings.client_id)
            .append_pair("redirect_uri", &settings.redirect_uri)
            .append_pair("scope", &settings.scopes)
            .append_pair("state", &self.state)
            .append_pair("nonce", &self.nonce)
            .append_pair("code_challenge", &self.challenge())
            .append_pair("code_challenge_method", "S256")
            .finish();
        let separator = if endpoint.contains('?') { '&' } else { '?' };
        format!("{endpoint}{separator}{query}")
    }
}

fn mac(key: &[u8; 32], part: &str) -> Vec<u8> {
    // A 32-byte key always suits HMAC-SHA256; the fallback (an empty tag) never verifies.
    match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mut mac) => {
            mac.update(part.as_bytes());
            mac.finalize().into_bytes().to_vec()
        }
        Err(_) => Vec::new(),
    }
}

/// The key sign-in cookies are signed with: derived from the admin token every replica shares,
/// so any replica can finish a sign-in another began.
pub fn login_key(admin_token: &str) -> [u8; 32] {
    mac(
        &Sha256::digest(admin_token.as_bytes()).into(),
        "switchyard single sign-on login state",
    )
    .try_into()
    .unwrap_or([0; 32])
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [7; 32];

    #[test]
    fn a_cookie_round_trips_under_its_key_until_it_expires() {
        let pending = Pending::new(1000).unwrap();
        let value = pending.cookie_value(&KEY);
        assert_eq!(
            Pending::from_cookie(&value, &KEY, 1000),
            Some(pending.clone())
        );
        assert_eq!(
            Pending::from_cookie(&value, &KEY, 1000 + LOGIN_TTL_SECS),
            None
        );
        assert_eq!(Pending::from_cookie(&value, &[8; 32], 1000), None);
        // Any changed part breaks the MAC.
        let forged = value.replacen(&pending.state, &random_token().unwrap(), 1);
        assert_eq!(Pending::from_cookie(&forged, &KEY, 1000), None);
        let longer = value.replacen(&format!(".{}.", pending.expires), ".999999999.", 1);
        assert_eq!(Pending::from_cookie(&longer, &KEY, 1000), None);
        assert_eq!(Pending::from_cookie("", &KEY, 1000), None);
    }

    #[test]
    fn the_challenge_is_s256_of_the_verifier() {
        // RFC 7636 appendix B.
        let pending = Pending {
            state: String::new(),
            nonce: String::new(),
            verifier: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk".into(),
            expires: 0,
        };
        assert_eq!(
            pending.challenge(),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn keys_differ_by_admin_token() {
        assert_ne!(
            login_key("a-long-enough-admin-token"),
            login_key("another-admin-token!")
        );
        assert_ne!(login_key("a-long-enough-admin-token"), [0; 32]);
    }
}
