//! Webhooks in the configuration file. They are the control plane's alone (no snapshot holds
//! them), so they are read from and written to their table here, each write through the
//! webhook resource's own code like every other resource's.
//!
//! The signing secret is never in the file: a webhook names it `${ENV_NAME}`, an environment
//! variable of the control plane read when a delivery is signed. A webhook the file gives no
//! `secret` keeps what is stored. A URL with a path is written as a read shows it (origin and
//! `/****`); given back in that form, the stored URL is kept.

use std::collections::{HashMap, HashSet};

use serde_json::{json, Map, Value};
use sqlx::PgConnection;
use switchyard_config::{env_reference, RawWebhook};

use crate::api::webhooks::{shown_url_sql, DEFAULT_THRESHOLDS};
use crate::error::{ApiError, ApiResult};

/// A 422 naming where in the file the problem is.
fn config_err(path: String, message: String) -> ApiError {
    ApiError::Validation {
        message: format!("{path}: {message}"),
        param: path,
    }
}

/// A stored webhook, with what the file form leaves out (its id, its whole URL).
#[derive(Debug, Clone, sqlx::FromRow)]
pub(super) struct StoredWebhook {
    pub id: i64,
    pub name: String,
    pub url: String,
    /// The URL as a read shows it.
    pub shown: String,
    pub kind: String,
    pub events: Vec<String>,
    pub thresholds: Vec<i32>,
    pub secret_env: Option<String>,
    pub enabled: bool,
}

pub(super) async fn stored(tx: &mut PgConnection) -> ApiResult<Vec<StoredWebhook>> {
    let sql = format!(
        "SELECT id, name, url, {} AS shown, kind, events, thresholds, secret_env, enabled \
         FROM webhooks ORDER BY name",
        shown_url_sql("url")
    );
    Ok(sqlx::query_as(&sql).fetch_all(&mut *tx).await?)
}

/// Thresholds as the file writes them: sorted, each once; absent when they are the default.
fn thresholds_form(thresholds: &[i32]) -> Option<Vec<i32>> {
    let mut sorted = thresholds.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    (sorted != DEFAULT_THRESHOLDS).then_some(sorted)
}

/// Events as stored: each once, in the order given.
fn events_form(events: &[String]) -> Vec<String> {
    let mut seen = HashSet::new();
    events
        .iter()
        .map(|e| e.trim().to_owned())
        .filter(|e| seen.insert(e.clone()))
        .collect()
}

/// A stored webhook in file form.
pub(super) fn file_form(w: &StoredWebhook) -> RawWebhook {
    RawWebhook {
        name: w.name.clone(),
        url: w.shown.clone(),
        kind: w.kind.clone(),
        events: w.events.clone(),
        thresholds: thresholds_form(&w.thresholds),
        secret: w.secret_env.as_ref().map(|name| format!("${{{name}}}")),
        enabled: w.enabled,
    }
}

/// The tables' webhooks in file form, by name.
pub(super) fn canonical(stored: &[StoredWebhook]) -> Vec<RawWebhook> {
    let mut out: Vec<RawWebhook> = stored.iter().map(file_form).collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The file's webhooks in canonical form, checked against what is stored: names unique, a
/// secret only as `${ENV_NAME}` (a new webhook needs one), a masked URL only where the stored
/// URL it stands for exists.
pub(super) fn desired(raw: &[RawWebhook], stored: &[StoredWebhook]) -> ApiResult<Vec<RawWebhook>> {
    let by_name: HashMap<&str, &StoredWebhook> =
        stored.iter().map(|w| (w.name.as_str(), w)).collect();
    let mut names = HashSet::new();
    let mut out = Vec::with_capacity(raw.len());
    for (i, w) in raw.iter().enumerate() {
        let at = |field: &str| format!("webhooks[{i}].{field}");
        let name = w.name.trim().to_owned();
        if !names.insert(name.clone()) {
            return Err(config_err(
                at("name"),
                format!("another webhook is named {name:?}"),
            ));
        }
        let kept = by_name.get(name.as_str()).copied();
        let url = w.url.trim();
        let url =
            match kept {
                Some(s) if url == s.url || url == s.shown => s.shown.clone(),
                _ if url.ends_with("/****") => return Err(config_err(
                    at("url"),
                    "is masked (as an export writes it) but no stored webhook of this name has \
                     that URL to keep: give the whole URL"
                        .to_owned(),
                )),
                _ => url.to_owned(),
            };
        let secret = match (&w.secret, kept) {
            (Some(text), _) => match env_reference(text) {
                Some(env) => Some(format!("${{{env}}}")),
                None => {
                    return Err(config_err(
                        at("secret"),
                        "give the signing secret as `${ENV_NAME}`, an environment variable of \
                         the control plane: the file never holds it"
                            .to_owned(),
                    ))
                }
            },
            (None, Some(s)) => s.secret_env.as_ref().map(|name| format!("${{{name}}}")),
            (None, None) => {
                return Err(config_err(
                    at("secret"),
                    "a new webhook needs its signing secret, as `${ENV_NAME}`".to_owned(),
                ))
            }
        };
        out.push(RawWebhook {
            name,
            url,
            kind: w.kind.trim().to_owned(),
            events: events_form(&w.events),
            thresholds: w.thresholds.as_deref().and_then(thresholds_form),
            secret,
            enabled: w.enabled,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// A webhook's REST fields. A masked URL is left out (the stored one is kept); the secret is
/// named by its variable only, never read here.
pub(super) fn fields(w: &RawWebhook) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("name".to_owned(), json!(w.name));
    if !w.url.ends_with("/****") {
        fields.insert("url".to_owned(), json!(w.url));
    }
    fields.insert("kind".to_owned(), json!(w.kind));
    fields.insert("events".to_owned(), json!(w.events));
    let thresholds = w.thresholds.clone().unwrap_or(DEFAULT_THRESHOLDS.to_vec());
    fields.insert("thresholds".to_owned(), json!(thresholds));
    let env = w.secret.as_deref().and_then(env_reference);
    fields.insert("secret_env".to_owned(), json!(env));
    fields.insert("enabled".to_owned(), json!(w.enabled));
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored_hook() -> StoredWebhook {
        StoredWebhook {
            id: 4,
            name: "ops".into(),
            url: "https://hooks.example.com/services/T0/secret".into(),
            shown: "https://hooks.example.com/****".into(),
            kind: "slack".into(),
            events: vec!["budget_threshold".into()],
            thresholds: vec![100, 50, 80],
            secret_env: Some("OPS_SECRET".into()),
            enabled: true,
        }
    }

    #[test]
    fn an_exported_webhook_reads_back_as_itself_and_names_no_secret() {
        let stored = [stored_hook()];
        let exported = canonical(&stored);
        assert_eq!(exported[0].url, "https://hooks.example.com/****");
        assert_eq!(exported[0].secret.as_deref(), Some("${OPS_SECRET}"));
        assert_eq!(exported[0].thresholds, None, "the default is left out");
        assert_eq!(desired(&exported, &stored).ok(), Some(exported.clone()));
        let fields = fields(&exported[0]);
        assert!(
            !fields.contains_key("url"),
            "a masked URL is kept as stored"
        );
        assert_eq!(fields["secret_env"], "OPS_SECRET");
    }

    #[test]
    fn thresholds_other_than_the_default_are_written_sorted_and_once() {
        let mut hook = stored_hook();
        hook.thresholds = vec![90, 25, 90];
        assert_eq!(file_form(&hook).thresholds, Some(vec![25, 90]));
        // 50, 80 and 100 in any order are the default, which the file leaves out.
        hook.thresholds = vec![80, 100, 50];
        assert_eq!(file_form(&hook).thresholds, None);
    }

    #[test]
    fn a_new_url_replaces_the_stored_one_and_the_stored_one_reads_as_unchanged() {
        let stored = [stored_hook()];
        let url_of = |url: &str| {
            let mut raw = canonical(&stored);
            raw[0].url = url.into();
            desired(&raw, &stored)
                .ok()
                .map(|hooks| hooks[0].url.clone())
        };
        assert_eq!(
            url_of("https://hooks.example.com/services/T0/other").as_deref(),
            Some("https://hooks.example.com/services/T0/other"),
            "the file moves the webhook"
        );
        assert_eq!(
            url_of("https://hooks.example.com/services/T0/secret").as_deref(),
            Some("https://hooks.example.com/****"),
            "the whole stored URL is as a read shows it: no change to plan"
        );
    }

    #[test]
    fn a_secret_in_clear_or_a_masked_url_without_a_stored_one_is_refused() {
        let mut raw = canonical(&[stored_hook()]);
        raw[0].secret = Some("whsec-in-clear-0123456789".into());
        let refused = desired(&raw, &[stored_hook()]).err();
        assert!(
            matches!(refused, Some(crate::error::ApiError::Validation { ref param, .. })
            if param == "webhooks[0].secret"),
            "{refused:?}"
        );
        let mut new = canonical(&[stored_hook()]);
        new[0].name = "other".into();
        let refused = desired(&new, &[stored_hook()]).err();
        assert!(
            matches!(refused, Some(crate::error::ApiError::Validation { ref param, .. })
            if param == "webhooks[0].url"),
            "{refused:?}"
        );
        new[0].url = "https://example.com/hook".into();
        new[0].secret = None;
        let refused = desired(&new, &[stored_hook()]).err();
        assert!(
            matches!(refused, Some(crate::error::ApiError::Validation { ref param, .. })
            if param == "webhooks[0].secret"),
            "{refused:?}"
        );
    }
}
