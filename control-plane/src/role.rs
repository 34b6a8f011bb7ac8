//! The admin API's roles, at the bottom of the crate: the access rules, the admin tokens and the
//! single sign-on role mapping all speak of them.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What an admin token may do. Each role includes the ones below it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads everything the API shows (never a secret) and explains routing decisions.
    Viewer,
    /// Also what changes nothing stored: trial calls, dry runs and configuration plans.
    Operator,
    /// Every write, configuration apply, and managing admin tokens.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(text: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|role| role.as_str() == text)
    }
}

impl TryFrom<String> for Role {
    type Error = String;

    /// A role as stored in `admin_tokens.role`.
    fn try_from(text: String) -> Result<Role, String> {
        Role::parse(&text).ok_or_else(|| format!("unknown role {text:?}"))
    }
}
