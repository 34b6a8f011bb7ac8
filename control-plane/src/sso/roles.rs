//! From a person's groups to a role: the mapping `SWITCHYARD_SSO_ROLES` states.
//!
//! A mapping is `group=role` (the whole fleet) or `group=role@team` (one team, by name). When
//! several of a person's groups are mapped, a fleet-wide role wins over any team role, and the
//! highest role wins among the fleet-wide ones; among team roles, the highest, and at the same
//! role the mapping written first. A person none of whose groups is mapped gets no role.

use serde_json::{Map, Value};

use crate::role::Role;

/// One `group=role[@team]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    group: String,
    role: Role,
    team: Option<String>,
}

/// What a person's groups grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    Fleet(Role),
    /// The role within the team of this name.
    Team {
        role: Role,
        team: String,
    },
}

#[derive(Debug, Clone, Default)]
pub struct RoleMap {
    entries: Vec<Entry>,
}

impl RoleMap {
    /// Parses `group=role[@team]` entries, comma-separated. A group name may hold `=` (the role
    /// follows the last one) but not a comma.
    pub fn parse(text: &str) -> Result<RoleMap, String> {
        let mut entries = Vec::new();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (group, grant) = item
                .rsplit_once('=')
                .ok_or_else(|| format!("{item:?} is not group=role or group=role@team"))?;
            let group = group.trim();
            if group.is_empty() {
                return Err(format!("{item:?} names no group"));
            }
            let (role, team) = match grant.split_once('@') {
                Some((role, team)) if !team.trim().is_empty() => {
                    (role, Some(team.trim().to_owned()))
                }
                Some(_) => return Err(format!("{item:?} names no team after @")),
                None => (grant, None),
            };
            let role = Role::parse(role.trim())
                .ok_or_else(|| format!("{item:?}: the role must be viewer, operator or admin"))?;
            entries.push(Entry {
                group: group.to_owned(),
                role,
                team,
            });
        }
        if entries.is_empty() {
            return Err("no group is mapped to a role".into());
        }
        Ok(RoleMap { entries })
    }

    /// What `groups` grant; `None`: no group of theirs is mapped.
    pub fn grant(&self, groups: &[String]) -> Option<Grant> {
        let mine = || {
            self.entries
                .iter()
                .filter(move |e| groups.contains(&e.group))
        };
        if let Some(role) = mine().filter(|e| e.team.is_none()).map(|e| e.role).max() {
            return Some(Grant::Fleet(role));
        }
        let mut best: Option<&Entry> = None;
        for entry in mine() {
            if best.is_none_or(|b| entry.role > b.role) {
                best = Some(entry);
            }
        }
        best.and_then(|e| {
            e.team
                .clone()
                .map(|team| Grant::Team { role: e.role, team })
        })
    }
}

/// The groups a token's claims carry at `path`: an array's strings, or a single string as one
/// group; nothing when the claim is missing or of another type.
pub fn groups_in(claims: &Map<String, Value>, path: &[String]) -> Vec<String> {
    let mut at: Option<&Value> = None;
    for (i, part) in path.iter().enumerate() {
        at = if i == 0 {
            claims.get(part)
        } else {
            at.and_then(|v| v.get(part))
        };
    }
    match at {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        Some(Value::String(one)) => vec![one.clone()],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn groups(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn entries_parse_with_teams_and_groups_holding_equals_signs() {
        let map = RoleMap::parse(" ops=admin, a=b=viewer ,leads=operator@research ").unwrap();
        assert_eq!(map.entries.len(), 3);
        assert_eq!(map.entries[1].group, "a=b");
        assert_eq!(map.entries[2].team.as_deref(), Some("research"));
        for bad in ["", "ops", "=admin", "ops=root", "ops=admin@", "ops=admin@ "] {
            assert!(RoleMap::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn a_fleet_role_wins_over_team_roles_and_the_highest_wins() {
        let map =
            RoleMap::parse("viewers=viewer,ops=admin,leads=admin@research,helpers=operator@web")
                .unwrap();
        assert_eq!(
            map.grant(&groups(&["viewers", "leads"])),
            Some(Grant::Fleet(Role::Viewer))
        );
        assert_eq!(
            map.grant(&groups(&["viewers", "ops"])),
            Some(Grant::Fleet(Role::Admin))
        );
        assert_eq!(
            map.grant(&groups(&["helpers", "leads"])),
            Some(Grant::Team {
                role: Role::Admin,
                team: "research".into()
            })
        );
        assert_eq!(map.grant(&groups(&["staff"])), None);
        assert_eq!(map.grant(&[]), None);
    }

    #[test]
    fn at_the_same_team_role_the_first_mapping_wins() {
        let map = RoleMap::parse("a=admin@one,b=admin@two").unwrap();
        assert_eq!(
            map.grant(&groups(&["b", "a"])),
            Some(Grant::Team {
                role: Role::Admin,
                team: "one".into()
            })
        );
    }

    #[test]
    fn groups_are_read_from_arrays_strings_and_nested_claims() {
        let claims = json!({
            "groups": ["a", 7, "b"],
            "email": "x@example.com",
            "realm_access": {"roles": ["r"]},
            "n": 3
        });
        let claims = claims.as_object().unwrap();
        let path = |p: &str| p.split('.').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(groups_in(claims, &path("groups")), ["a", "b"]);
        assert_eq!(groups_in(claims, &path("email")), ["x@example.com"]);
        assert_eq!(groups_in(claims, &path("realm_access.roles")), ["r"]);
        assert!(groups_in(claims, &path("n")).is_empty());
        assert!(groups_in(claims, &path("missing.roles")).is_empty());
    }
}
