//! Who signed in: the bottom of single sign-on, named by the sessions and the sign-in alike.

use crate::role::Role;

/// Someone the provider vouched for, with the role their groups grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Person {
    /// The provider's `sub`.
    pub subject: String,
    /// What the audit log calls them: the `email` claim, else the subject.
    pub name: String,
    pub role: Role,
    /// The one team the role is limited to; `None`: the whole fleet.
    pub team: Option<i64>,
}
