//! A key's files and batches, listed without a database: each object the gateway answers for
//! a key is put in the key's index in the shared state (member: its gateway id; value: the
//! object as last answered), kept for [`INDEX_TTL_MS`] after it was last seen. A list answers
//! from the index alone (no upstream call): the objects as the gateway last saw them, newest
//! first; `GET` of one gives its current state. A deletion removes it.

use serde_json::{json, Value};
use switchyard_engine::TokenId;
use switchyard_state::{unix_ms, IndexEntry, RecordError, StateStore};

use crate::errors::GatewayError;
use crate::object_id::Kind;

/// How long an object stays listed after the gateway last answered for it: 30 days, how long
/// OpenAI keeps a batch.
pub const INDEX_TTL_MS: u64 = 30 * 24 * 3_600_000;

/// The most objects one list page holds, and the default.
pub const MAX_PAGE: usize = 100;
const DEFAULT_PAGE: usize = 20;

fn index_name(kind: Kind, token: TokenId) -> String {
    format!("{}:{token}", kind.noun().replace(' ', "_"))
}

/// Keeps `object` (its id the gateway's) in the key's index. A failure is logged, never the
/// client's: the object stays reachable by its id.
pub async fn remember(store: &dyn StateStore, kind: Kind, token: TokenId, object: &Value) {
    let Some(id) = object.get("id").and_then(Value::as_str) else {
        return;
    };
    let now = unix_ms();
    let entry = IndexEntry {
        member: id.to_owned(),
        value: object.to_string(),
        expires_at: now + INDEX_TTL_MS,
    };
    if let Err(e) = store.index_put(&index_name(kind, token), entry, now).await {
        tracing::warn!(error = %e, kind = kind.noun(), "a file or batch could not be added to its key's list");
    }
}

/// Drops `id` from the key's index (logged when the store is away).
pub async fn forget(store: &dyn StateStore, kind: Kind, token: TokenId, id: &str) {
    if let Err(e) = store.index_remove(&index_name(kind, token), id).await {
        tracing::warn!(error = %e, kind = kind.noun(), "a deleted file or batch could not be removed from its key's list");
    }
}

/// One list page of the key's objects, newest first: at most `limit` (1 to [`MAX_PAGE`],
/// default 20) after the object `after`, in OpenAI's list shape.
pub async fn page(
    store: &dyn StateStore,
    kind: Kind,
    token: TokenId,
    query: Option<&str>,
) -> Result<Value, GatewayError> {
    let entries = store
        .index_list(&index_name(kind, token), unix_ms())
        .await
        .map_err(|e| match e {
            RecordError::Unavailable(why) => {
                tracing::warn!(why, "a key's files or batches could not be listed");
                GatewayError::StateUnavailable
            }
            RecordError::TooLarge => GatewayError::InvalidRequest("the list is too large".into()),
        })?;
    let mut objects: Vec<Value> = entries
        .into_iter()
        .filter_map(|e| serde_json::from_str(&e.value).ok())
        .collect();
    let created = |o: &Value| o.get("created_at").and_then(Value::as_u64).unwrap_or(0);
    let id = |o: &Value| o.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
    objects.sort_by(|a, b| created(b).cmp(&created(a)).then_with(|| id(a).cmp(&id(b))));
    let (limit, after) = paging(query)?;
    let start = match after {
        Some(after) => objects
            .iter()
            .position(|o| id(o) == after)
            .map_or(objects.len(), |i| i + 1),
        None => 0,
    };
    let rest = objects.split_off(start.min(objects.len()));
    let has_more = rest.len() > limit;
    let data: Vec<Value> = rest.into_iter().take(limit).collect();
    Ok(json!({
        "object": "list",
        "first_id": data.first().map(id),
        "last_id": data.last().map(id),
        "has_more": has_more,
        "data": data,
    }))
}

/// `limit` and `after` of a list's query string.
fn paging(query: Option<&str>) -> Result<(usize, Option<String>), GatewayError> {
    let mut limit = DEFAULT_PAGE;
    let mut after = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "limit" => {
                limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| {
                        GatewayError::InvalidRequest(format!(
                            "`limit` must be a whole number from 1 to {MAX_PAGE}"
                        ))
                    })?;
            }
            // OpenAI's cursor, and Anthropic's.
            "after" | "after_id"
                if !value.is_empty() && value.len() <= crate::object_id::MAX_ID_LEN =>
            {
                after = Some(value.to_owned());
            }
            _ => {}
        }
    }
    Ok((limit, after))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use switchyard_state::InMemoryStore;

    use super::*;

    #[tokio::test]
    async fn a_page_lists_the_keys_own_newest_first_after_its_cursor() {
        let store = InMemoryStore::new();
        for (id, created) in [("file-a", 1), ("file-b", 3), ("file-c", 2)] {
            remember(
                &store,
                Kind::File,
                7,
                &json!({"id": id, "created_at": created}),
            )
            .await;
        }
        remember(
            &store,
            Kind::File,
            8,
            &json!({"id": "file-other", "created_at": 9}),
        )
        .await;
        remember(
            &store,
            Kind::Batch,
            7,
            &json!({"id": "batch_x", "created_at": 9}),
        )
        .await;
        let ids = |page: &Value| -> Vec<String> {
            page["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["id"].as_str().unwrap().to_owned())
                .collect()
        };
        let all = page(&store, Kind::File, 7, None).await.unwrap();
        assert_eq!(ids(&all), ["file-b", "file-c", "file-a"]);
        assert_eq!(all["has_more"], false);
        let first = page(&store, Kind::File, 7, Some("limit=2")).await.unwrap();
        assert_eq!(ids(&first), ["file-b", "file-c"]);
        assert_eq!(first["has_more"], true);
        let next = page(&store, Kind::File, 7, Some("limit=2&after=file-c"))
            .await
            .unwrap();
        assert_eq!(ids(&next), ["file-a"]);
        forget(&store, Kind::File, 7, "file-b").await;
        assert_eq!(
            ids(&page(&store, Kind::File, 7, None).await.unwrap()),
            ["file-c", "file-a"]
        );
        for bad in ["limit=0", "limit=101", "limit=x"] {
            assert!(
                page(&store, Kind::File, 7, Some(bad)).await.is_err(),
                "{bad}"
            );
        }
    }
}
