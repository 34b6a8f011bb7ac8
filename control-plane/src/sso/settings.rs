//! Single sign-on's settings: the command-line flags (each with its environment variable) and
//! their validated form. Single sign-on is off unless `SWITCHYARD_SSO_ISSUER` is set; once it is,
//! the client id, the public URL and the role mapping are required too.

use std::time::Duration;

use super::roles::RoleMap;

/// Seconds a token's time claims may be off from this clock (`exp`, `nbf`, `iat`).
pub const CLOCK_SKEW_SECS: i64 = 60;

/// The console's callback path, below the public URL.
pub const CALLBACK_PATH: &str = "/console/sso/callback";

/// The flags of single sign-on (flattened into the control plane's own).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SsoArgs {
    /// Issuer URL of the OpenID Connect provider (its discovery document is at
    /// `<issuer>/.well-known/openid-configuration`). Unset: single sign-on is off.
    #[arg(long = "sso-issuer", env = "SWITCHYARD_SSO_ISSUER")]
    pub issuer: Option<String>,

    /// The client id registered at the provider for this control plane.
    #[arg(long = "sso-client-id", env = "SWITCHYARD_SSO_CLIENT_ID")]
    pub client_id: Option<String>,

    /// The client secret (HTTP Basic at the token endpoint); unset for a public client, which
    /// proves itself with PKCE alone.
    #[arg(
        long = "sso-client-secret",
        env = "SWITCHYARD_SSO_CLIENT_SECRET",
        hide_env_values = true
    )]
    pub client_secret: Option<String>,

    /// The URL people reach the console at (`https://switchyard.example.com`); the redirect URI
    /// registered at the provider is this followed by `/console/sso/callback`.
    #[arg(long = "public-url", env = "SWITCHYARD_PUBLIC_URL")]
    pub public_url: Option<String>,

    /// Scopes asked for at sign-in (space-separated; must include `openid`).
    #[arg(
        long = "sso-scopes",
        env = "SWITCHYARD_SSO_SCOPES",
        default_value = "openid email profile"
    )]
    pub scopes: String,

    /// The claim that carries a person's groups (a dotted path such as `realm_access.roles`
    /// reaches into an object; a claim holding one string counts as one group).
    #[arg(
        long = "sso-groups-claim",
        env = "SWITCHYARD_SSO_GROUPS_CLAIM",
        default_value = "groups"
    )]
    pub groups_claim: String,

    /// Which groups get which role: `group=role` for the whole fleet, `group=role@team` for one
    /// team (by name), comma-separated (`ops=admin,auditors=viewer,research-leads=admin@research`).
    #[arg(long = "sso-roles", env = "SWITCHYARD_SSO_ROLES")]
    pub roles: Option<String>,

    /// Audiences accepted in bearer tokens (JWTs) the API is called with, comma-separated;
    /// default: the client id.
    #[arg(long = "sso-audiences", env = "SWITCHYARD_SSO_AUDIENCES")]
    pub audiences: Option<String>,

    /// Hours a console session lasts (1 to 720).
    #[arg(long = "sso-session-hours", env = "SWITCHYARD_SSO_SESSION_HOURS", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=720))]
    pub session_hours: u32,

    /// Seconds the provider's discovery document and signing keys are kept before they are
    /// fetched again (60 to 86400).
    #[arg(long = "sso-keys-max-age-secs", env = "SWITCHYARD_SSO_KEYS_MAX_AGE_SECS", default_value_t = 3600,
          value_parser = clap::value_parser!(u64).range(60..=86_400))]
    pub keys_max_age_secs: u64,

    /// Least seconds between two fetches of the signing keys caused by a token naming a key not
    /// held (a rotation); 0 to 3600.
    #[arg(long = "sso-keys-refetch-secs", env = "SWITCHYARD_SSO_KEYS_REFETCH_SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub keys_refetch_secs: u64,
}

/// Validated single sign-on settings.
#[derive(Debug, Clone)]
pub struct SsoSettings {
    /// Exactly as configured: the discovery document and every token must name this issuer.
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    /// The registered redirect URI.
    pub redirect_uri: String,
    pub scopes: String,
    /// The groups claim's path (`["realm_access", "roles"]`).
    pub groups_claim: Vec<String>,
    pub roles: RoleMap,
    pub audiences: Vec<String>,
    pub session_ttl: Duration,
    pub keys_max_age: Duration,
    pub keys_refetch: Duration,
}

impl SsoArgs {
    /// `None`: single sign-on is off. An error names the variable at fault.
    pub fn settings(&self) -> Result<Option<SsoSettings>, String> {
        let Some(issuer) = self
            .issuer
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
        else {
            if self.client_id.is_some() || self.roles.is_some() {
                return Err("SWITCHYARD_SSO_CLIENT_ID and SWITCHYARD_SSO_ROLES need \
                            SWITCHYARD_SSO_ISSUER (single sign-on is off without it)"
                    .into());
            }
            return Ok(None);
        };
        check_url("SWITCHYARD_SSO_ISSUER", issuer)?;
        let client_id = required("SWITCHYARD_SSO_CLIENT_ID", self.client_id.as_deref())?;
        let public_url = required("SWITCHYARD_PUBLIC_URL", self.public_url.as_deref())?;
        check_url("SWITCHYARD_PUBLIC_URL", &public_url)?;
        let roles = RoleMap::parse(&required("SWITCHYARD_SSO_ROLES", self.roles.as_deref())?)
            .map_err(|e| format!("SWITCHYARD_SSO_ROLES: {e}"))?;
        if !self.scopes.split_whitespace().any(|s| s == "openid") {
            return Err("SWITCHYARD_SSO_SCOPES must include openid".into());
        }
        let groups_claim: Vec<String> = self.groups_claim.split('.').map(str::to_owned).collect();
        if groups_claim.iter().any(|part| part.trim().is_empty()) {
            return Err("SWITCHYARD_SSO_GROUPS_CLAIM must be a claim name or a dotted path".into());
        }
        let audiences = match self.audiences.as_deref() {
            Some(list) => list
                .split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(str::to_owned)
                .collect(),
            None => vec![client_id.clone()],
        };
        if audiences.is_empty() {
            return Err("SWITCHYARD_SSO_AUDIENCES names no audience".into());
        }
        Ok(Some(SsoSettings {
            issuer: issuer.to_owned(),
            client_id,
            client_secret: self.client_secret.clone().filter(|s| !s.is_empty()),
            redirect_uri: format!("{}{CALLBACK_PATH}", public_url.trim_end_matches('/')),
            scopes: self.scopes.split_whitespace().collect::<Vec<_>>().join(" "),
            groups_claim,
            roles,
            audiences,
            session_ttl: Duration::from_secs(u64::from(self.session_hours) * 3600),
            keys_max_age: Duration::from_secs(self.keys_max_age_secs),
            keys_refetch: Duration::from_secs(self.keys_refetch_secs),
        }))
    }
}

fn required(name: &str, value: Option<&str>) -> Result<String, String> {
    value
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| format!("{name} is required when SWITCHYARD_SSO_ISSUER is set"))
}

/// An `https://` URL, or `http://` to a loopback host (a provider on the same machine, a test).
pub fn check_url(name: &str, value: &str) -> Result<(), String> {
    let url = url::Url::parse(value).map_err(|e| format!("{name} is not a URL: {e}"))?;
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("{name} must not have a query or fragment"));
    }
    match url.scheme() {
        "https" => Ok(()),
        "http" if is_loopback(&url) => Ok(()),
        _ => Err(format!(
            "{name} must be an https:// URL (http:// only to a loopback host)"
        )),
    }
}

fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(domain)) => domain == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> SsoArgs {
        SsoArgs {
            issuer: Some("https://login.example.com/realms/ops".into()),
            client_id: Some("switchyard".into()),
            public_url: Some("https://switchyard.example.com/".into()),
            roles: Some("ops=admin".into()),
            scopes: "openid email".into(),
            groups_claim: "groups".into(),
            session_hours: 8,
            keys_max_age_secs: 3600,
            keys_refetch_secs: 10,
            ..SsoArgs::default()
        }
    }

    #[test]
    fn off_unless_an_issuer_is_set_and_complete_once_it_is() {
        let none = SsoArgs::default();
        assert!(none.settings().unwrap().is_none());
        let settings = args().settings().unwrap().unwrap();
        assert_eq!(
            settings.redirect_uri,
            "https://switchyard.example.com/console/sso/callback"
        );
        assert_eq!(settings.audiences, ["switchyard"]);
        let mut missing = args();
        missing.roles = None;
        assert!(missing
            .settings()
            .unwrap_err()
            .contains("SWITCHYARD_SSO_ROLES"));
        let orphan = SsoArgs {
            client_id: Some("x".into()),
            ..SsoArgs::default()
        };
        assert!(orphan.settings().is_err());
    }

    #[test]
    fn urls_are_https_unless_loopback() {
        assert!(check_url("X", "https://idp.example.com").is_ok());
        assert!(check_url("X", "http://localhost:8080").is_ok());
        assert!(check_url("X", "http://127.0.0.1:8080/realms/a").is_ok());
        assert!(check_url("X", "http://idp.example.com").is_err());
        assert!(check_url("X", "https://idp.example.com/?a=b").is_err());
        let mut plain = args();
        plain.issuer = Some("http://idp.example.com".into());
        assert!(plain.settings().is_err());
    }

    #[test]
    fn scopes_must_ask_for_openid() {
        let mut no_openid = args();
        no_openid.scopes = "email profile".into();
        assert!(no_openid.settings().unwrap_err().contains("openid"));
    }
}
