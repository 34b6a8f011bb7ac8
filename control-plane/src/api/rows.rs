//! The per-table plumbing every resource shares: read one row by id (optionally locking it), read
//! a cursor page of rows, commit a write of a row with its audit row, and delete a row.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Postgres, Transaction};
use utoipa::ToSchema;

use super::{with_revision, Page};
use crate::db::{commit_write, Audit};
use crate::error::{ApiError, ApiResult};

/// A resource stored as one row of one table, addressed by its `id` column.
pub(super) trait Resource {
    /// The table the rows live in.
    const TABLE: &'static str;
    /// What the resource is called in 404 errors and audit rows.
    const NOUN: &'static str;
}

/// A view read straight from its resource's table.
pub(super) trait TableRow:
    Resource + for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin
{
    /// The select list (also used in `RETURNING`) producing this view.
    fn columns() -> String;
    fn id(&self) -> i64;
}

/// Makes `$view` (a struct with an `id: i64` field) the row of `$table`, read with the select
/// list `$columns()`, and called `$noun` in errors and audit rows.
macro_rules! table_row {
    ($view:ty, $table:literal, $noun:literal, $columns:path) => {
        impl $crate::api::rows::Resource for $view {
            const TABLE: &'static str = $table;
            const NOUN: &'static str = $noun;
        }

        impl $crate::api::rows::TableRow for $view {
            fn columns() -> String {
                $columns()
            }

            fn id(&self) -> i64 {
                self.id
            }
        }
    };
}
pub(super) use table_row;

/// Row `id` of `T`'s table, `FOR UPDATE` when `lock`; a 404 naming `T` if there is none.
pub(super) async fn fetch_row<T: TableRow>(
    executor: impl sqlx::PgExecutor<'_>,
    id: i64,
    lock: bool,
) -> ApiResult<T> {
    let sql = format!(
        "SELECT {} FROM {} WHERE id = $1{}",
        T::columns(),
        T::TABLE,
        if lock { " FOR UPDATE" } else { "" }
    );
    sqlx::query_as::<_, T>(&sql)
        .bind(id)
        .fetch_optional(executor)
        .await?
        .ok_or_else(|| ApiError::not_found(T::NOUN, id))
}

/// One page of `T`'s rows in id order, only those whose `scope` column equals its value when set.
/// `bounds` is [`PageQuery::bounds`](super::PageQuery::bounds), taken by the caller first so a bad
/// `limit` or `cursor` is reported before the parent's existence is checked.
pub(super) async fn list_rows<T: TableRow + ToSchema>(
    pool: &PgPool,
    scope: Option<(&'static str, i64)>,
    (fetch_n, after): (i64, i64),
) -> ApiResult<Page<T>> {
    // `WHERE [scope = $1 AND] id > $n ORDER BY id LIMIT $n+1`
    let (filter, n) = match scope {
        Some((column, _)) => (format!("{column} = $1 AND "), 2),
        None => (String::new(), 1),
    };
    let sql = format!(
        "SELECT {} FROM {} WHERE {filter}id > ${n} ORDER BY id LIMIT ${}",
        T::columns(),
        T::TABLE,
        n + 1
    );
    let mut query = sqlx::query_as::<_, T>(&sql);
    if let Some((_, value)) = scope {
        query = query.bind(value);
    }
    let rows = query.bind(after).bind(fetch_n).fetch_all(pool).await?;
    Ok(Page::from_rows(rows, fetch_n, T::id))
}

/// Commits `tx` as an audited write of row `id` of `T` (`action`: create, update, delete...):
/// bumps the revision, writes the audit row and notifies the replicas. Returns the revision.
pub(super) async fn commit_row<T: Resource>(
    tx: Transaction<'_, Postgres>,
    actor: &str,
    action: &'static str,
    id: i64,
    detail: Value,
) -> ApiResult<i64> {
    commit_write(
        tx,
        Audit {
            actor,
            action,
            resource: T::NOUN,
            resource_id: Some(id),
            detail,
        },
    )
    .await
}

/// Deletes row `id` of `T`'s table (which the caller has locked in `tx` and checked may go) and
/// commits the write with a `delete` audit row carrying `detail`: a 204 with the new revision.
pub(super) async fn delete_row<T: Resource>(
    mut tx: Transaction<'_, Postgres>,
    actor: &str,
    id: i64,
    detail: Value,
) -> ApiResult<Response> {
    sqlx::query(&format!("DELETE FROM {} WHERE id = $1", T::TABLE))
        .bind(id)
        .execute(&mut *tx)
        .await?;
    let revision = commit_row::<T>(tx, actor, "delete", id, detail).await?;
    Ok(with_revision(revision, StatusCode::NO_CONTENT))
}
