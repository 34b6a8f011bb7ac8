//! What the admin handlers answer with besides their bodies: a page of a list (and the query
//! asking for one) and the snapshot revision header a write adds.

use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, ApiResult};

/// Adds the snapshot revision a write produced as a response header.
pub fn with_revision(revision: i64, response: impl IntoResponse) -> Response {
    let mut response = response.into_response();
    if let Ok(value) = HeaderValue::from_str(&revision.to_string()) {
        response
            .headers_mut()
            .insert("x-switchyard-revision", value);
    }
    response
}

/// `limit` (1..=500, default 50) and an opaque `cursor` from the previous page's `next_cursor`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

pub const DEFAULT_PAGE: i64 = 50;
pub const MAX_PAGE: i64 = 500;

impl PageQuery {
    /// (rows to fetch = limit + 1, id to start after).
    pub fn bounds(&self) -> ApiResult<(i64, i64)> {
        let limit = self.limit.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(ApiError::bad_request(
                Some("limit"),
                format!("limit must be between 1 and {MAX_PAGE}, got {limit}"),
            ));
        }
        let after = match self.cursor.as_deref() {
            None | Some("") => 0,
            Some(cursor) => cursor.parse::<i64>().map_err(|_| {
                ApiError::bad_request(Some("cursor"), "cursor is not one this API returned")
            })?,
        };
        Ok((limit + 1, after))
    }
}

/// One page of a list; `next_cursor` is `null` on the last page.
#[derive(Debug, Serialize, ToSchema)]
pub struct Page<T: ToSchema> {
    pub data: Vec<T>,
    pub next_cursor: Option<String>,
}

impl<T: ToSchema> Page<T> {
    /// Builds a page from `limit + 1` rows ordered by id.
    pub fn from_rows(rows: Vec<T>, fetch: i64, id_of: impl Fn(&T) -> i64) -> Page<T> {
        let (data, next_cursor) = cut_page(rows, fetch, id_of);
        Page { data, next_cursor }
    }
}

/// `fetch` = `limit + 1` rows ordered by id cut to `limit`, with the cursor of the next page when
/// there is one.
pub(super) fn cut_page<T>(
    mut rows: Vec<T>,
    fetch: i64,
    id_of: impl Fn(&T) -> i64,
) -> (Vec<T>, Option<String>) {
    let limit = usize::try_from(fetch - 1).unwrap_or(0);
    let next_cursor = if rows.len() > limit {
        rows.truncate(limit);
        rows.last().map(|row| id_of(row).to_string())
    } else {
        None
    };
    (rows, next_cursor)
}
