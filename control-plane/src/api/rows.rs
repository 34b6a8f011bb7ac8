//! The per-table plumbing every resource shares: read one row by id (optionally locking it, or as
//! the view the API shows of it), read a cursor page of rows (of a parent's children), build the
//! statement that inserts or updates a row from its column list, commit a write of a row with its
//! audit row and answer with it, and delete a row.
//!
//! The generic handlers of `crud.rs` read through these helpers; each resource module's `*_in`
//! functions (the resource layer the generic handlers, the dry run and configuration apply call)
//! use them too.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::Value;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::{PgPool, Postgres, Transaction};
use utoipa::ToSchema;

use super::access::{owned_or_missing, Owned};
use super::reply::{cut_page, with_revision, Page};
use crate::db::{commit_write, Audit};
use crate::error::{ApiError, ApiResult};

/// Where a write runs: a pool, on which it takes its own transaction, or a dry run's transaction
/// (`super::dry_run`), in which it takes a savepoint that the dry run rolls back.
pub(super) trait Db<'c>: sqlx::Acquire<'c, Database = Postgres> {}

impl<'c, A: sqlx::Acquire<'c, Database = Postgres>> Db<'c> for A {}

/// A resource stored as one row of one table, addressed by its `id` column.
pub(super) trait Resource {
    /// The table the rows live in.
    const TABLE: &'static str;
    /// What the resource is called in 404 errors and audit rows.
    const NOUN: &'static str;
}

/// A row read straight from its resource's table: the view the API shows, or the stored form a
/// [`RowView`] is converted from.
pub(super) trait TableRow:
    Resource + for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin
{
    /// The select list (also used in `RETURNING`) producing this row.
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

/// A view the API shows of a row read as `Self::Row` and converted (stored micros shown as
/// decimal strings and the like).
pub(super) trait RowView: From<Self::Row> + ToSchema {
    type Row: TableRow;
}

/// A query reading `O` whose arguments are still being bound.
pub(super) type RowQuery<'q, O> = sqlx::query::QueryAs<'q, Postgres, O, PgArguments>;

/// `INSERT` of one row of `T`'s table setting `columns` (a comma-separated list) to `$1`.. in
/// order, `RETURNING` the row.
pub(super) fn insert_sql<T: TableRow>(columns: &str) -> String {
    let values: Vec<String> = (1..=columns.split(',').count())
        .map(|n| format!("${n}"))
        .collect();
    format!(
        "INSERT INTO {} ({columns}) VALUES ({}) RETURNING {}",
        T::TABLE,
        values.join(", "),
        T::columns()
    )
}

/// `UPDATE` of row `$n+1` of `T`'s table setting `columns` (a comma-separated list) to `$1`..`$n`
/// in order and `updated_at` to now, `RETURNING` the row.
pub(super) fn update_sql<T: TableRow>(columns: &str) -> String {
    let sets: Vec<String> = (1..)
        .zip(columns.split(','))
        .map(|(n, column)| format!("{} = ${n}", column.trim()))
        .collect();
    format!(
        "UPDATE {} SET {}, updated_at = now() WHERE id = ${} RETURNING {}",
        T::TABLE,
        sets.join(", "),
        sets.len() + 1,
        T::columns()
    )
}

/// A reference a body makes to row `id` of `table` (a channel, a team): a 422 naming `field`
/// ("channel_id 7 does not exist") when there is no such row.
pub(super) async fn check_reference(
    tx: &mut sqlx::PgConnection,
    table: &str,
    field: &'static str,
    id: i64,
) -> ApiResult<()> {
    let sql = format!("SELECT EXISTS (SELECT 1 FROM {table} WHERE id = $1)");
    let exists: bool = sqlx::query_scalar(&sql)
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    if exists {
        Ok(())
    } else {
        Err(ApiError::validation(
            field,
            format!("{field} {id} does not exist"),
        ))
    }
}

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

/// A transaction on `db` with row `id` of `T` read and locked in it; a 404 naming `T` if there is
/// none.
pub(super) async fn lock_row<'c, T: TableRow>(
    db: impl Db<'c>,
    id: i64,
) -> ApiResult<(Transaction<'c, Postgres>, T)> {
    let mut tx = db.begin().await?;
    let row = fetch_row::<T>(&mut *tx, id, true).await?;
    Ok((tx, row))
}

/// Row `id` of `V`'s table as `V` shows it; a 404 naming it if there is none.
pub(super) async fn fetch_view<V: RowView>(
    executor: impl sqlx::PgExecutor<'_>,
    id: i64,
) -> ApiResult<V> {
    Ok(V::from(fetch_row::<V::Row>(executor, id, false).await?))
}

/// One page of `T`'s rows in id order, only those whose `scope` column equals its value when set.
/// `bounds` is [`PageQuery::bounds`](super::reply::PageQuery::bounds), taken by the caller first
/// so a bad `limit` or `cursor` is reported before the parent's existence is checked.
pub(super) async fn list_rows<T: TableRow + ToSchema>(
    pool: &PgPool,
    scope: Option<(&'static str, i64)>,
    bounds: (i64, i64),
) -> ApiResult<Page<T>> {
    let filter = scope.map(|(column, value)| (format!("{column} = $1"), value));
    let rows = select_page::<T>(pool, filter, bounds).await?;
    Ok(Page::from_rows(rows, bounds.0, T::id))
}

/// [`list_rows`] of the `T`s whose `column` holds `parent`, an id of `P`'s table; a 404 naming `P`
/// if there is no such row.
pub(super) async fn list_children<P: TableRow, T: TableRow + ToSchema>(
    pool: &PgPool,
    (column, parent): (&'static str, i64),
    bounds: (i64, i64),
) -> ApiResult<Page<T>> {
    fetch_row::<P>(pool, parent, false).await?;
    list_rows(pool, Some((column, parent)), bounds).await
}

/// [`list_rows`] of `V`'s rows, each as `V` shows it: every row, or with `team` only those of
/// the resource `team.0` that belong to the team `team.1`.
pub(super) async fn list_views<V: RowView>(
    pool: &PgPool,
    team: Option<(Owned, i64)>,
    bounds: (i64, i64),
) -> ApiResult<Page<V>> {
    let filter = team.map(|(owned, team)| (owned.belongs(1), team));
    let rows = select_page::<V::Row>(pool, filter, bounds).await?;
    let (rows, next_cursor) = cut_page(rows, bounds.0, TableRow::id);
    Ok(Page {
        data: rows.into_iter().map(V::from).collect(),
        next_cursor,
    })
}

/// The `fetch_n` rows of `T` after id `after`, in id order; with `filter`, only those meeting its
/// condition on `$1` (fixed SQL text), bound to its value.
async fn select_page<T: TableRow>(
    pool: &PgPool,
    filter: Option<(String, i64)>,
    (fetch_n, after): (i64, i64),
) -> ApiResult<Vec<T>> {
    // `WHERE [condition AND] id > $n ORDER BY id LIMIT $n+1`
    let (condition, n) = match &filter {
        Some((condition, _)) => (format!("{condition} AND "), 2),
        None => (String::new(), 1),
    };
    let sql = format!(
        "SELECT {} FROM {} WHERE {condition}id > ${n} ORDER BY id LIMIT ${}",
        T::columns(),
        T::TABLE,
        n + 1
    );
    let mut query = sqlx::query_as::<_, T>(&sql);
    if let Some((_, value)) = filter {
        query = query.bind(value);
    }
    Ok(query.bind(after).bind(fetch_n).fetch_all(pool).await?)
}

/// Who makes a write, and how it is committed. Every write of a resource (a REST call, a dry
/// run's change, a configuration file's change) goes through its module's `*_in` functions with
/// one of these.
#[derive(Debug, Clone, Copy)]
pub(super) struct By<'a> {
    /// The audit log's actor ([`super::extract::Actor`]).
    pub actor: &'a str,
    /// `false`: the write is its own revision with its own audit row, and notifies the replicas
    /// (REST, and a dry run's change inside its savepoint). `true`: the write joins the caller's
    /// transaction, which the caller commits as one revision with one audit row (a configuration
    /// file's apply).
    pub batched: bool,
    /// The one team the writer administers; `None`: the whole fleet. A resource layer a team
    /// admin reaches checks the row it writes against it.
    pub team: Option<i64>,
}

impl<'a> By<'a> {
    /// A write that is its own audited revision.
    pub(super) fn each(actor: &'a str) -> By<'a> {
        By {
            actor,
            batched: false,
            team: None,
        }
    }

    /// A write that is its own audited revision, by an admin of `team` only when it is `Some`.
    pub(super) fn each_of(actor: &'a str, team: Option<i64>) -> By<'a> {
        By {
            team,
            ..By::each(actor)
        }
    }

    /// A write that joins the caller's revision.
    pub(super) fn batched(actor: &'a str) -> By<'a> {
        By {
            actor,
            batched: true,
            team: None,
        }
    }
}

/// For a writer limited to one team ([`By::team`]): row `id` of `owned`, which the write has
/// locked, is the team's; otherwise the 404 a missing row gets. Nothing for a fleet writer.
pub(super) async fn team_before(
    tx: &mut sqlx::PgConnection,
    by: By<'_>,
    owned: Owned,
    id: i64,
) -> ApiResult<()> {
    match by.team {
        Some(team) => owned_or_missing(&mut *tx, owned, id, team).await,
        None => Ok(()),
    }
}

/// For a writer limited to one team: row `id` of `owned`, as the write left it in `tx`, is
/// still the team's; otherwise a 403 `outside_team` (the caller drops `tx`: nothing is stored).
/// What a team admin writes can never leave its team, whichever field would have moved it.
pub(super) async fn team_after(
    tx: &mut sqlx::PgConnection,
    by: By<'_>,
    owned: Owned,
    id: i64,
) -> ApiResult<()> {
    let Some(team) = by.team else {
        return Ok(());
    };
    if owned_or_missing(&mut *tx, owned, id, team).await.is_ok() {
        return Ok(());
    }
    Err(ApiError::OutsideTeam {
        message: format!(
            "the {} would not be of team {team}, the only team this admin token administers",
            owned.noun()
        ),
    })
}

/// Commits `tx` as an audited write of row `id` of `T` (`action`: create, update, delete...):
/// bumps the revision, writes the audit row and notifies the replicas. Returns the revision;
/// `None` for a batched write ([`By::batched`]), which only releases its savepoint.
pub(super) async fn commit_row<T: Resource>(
    tx: Transaction<'_, Postgres>,
    by: By<'_>,
    action: &'static str,
    id: i64,
    detail: Value,
) -> ApiResult<Option<i64>> {
    if by.batched {
        tx.commit().await?;
        return Ok(None);
    }
    let audit = Audit {
        actor: by.actor,
        action,
        resource: T::NOUN,
        resource_id: Some(id),
        detail,
        team: by.team,
    };
    Ok(Some(commit_write(tx, audit).await?))
}

/// `response`, with the revision header when the write produced one.
pub(super) fn answer(revision: Option<i64>, response: impl IntoResponse) -> Response {
    match revision {
        Some(revision) => with_revision(revision, response),
        None => response.into_response(),
    }
}

/// What a create or patch did to its row: the audit row's action and the answer's status.
#[derive(Clone, Copy)]
pub(super) enum Change {
    Create,
    Update,
}

/// Commits `tx` as the `change` of row `id` of `T` ([`commit_row`]): `body` as JSON, with a 201
/// for a create or a 200 for an update, and the new revision.
pub(super) async fn commit_view<T: Resource>(
    tx: Transaction<'_, Postgres>,
    by: By<'_>,
    change: Change,
    id: i64,
    detail: Value,
    body: impl Serialize,
) -> ApiResult<Response> {
    let (action, status) = match change {
        Change::Create => ("create", StatusCode::CREATED),
        Change::Update => ("update", StatusCode::OK),
    };
    let revision = commit_row::<T>(tx, by, action, id, detail).await?;
    Ok(answer(revision, (status, Json(body))))
}

/// Deletes row `id` of `T`'s table (which the caller has locked in `tx` and checked may go) and
/// commits the write with a `delete` audit row carrying `detail`: a 204 with the new revision.
pub(super) async fn delete_row<T: Resource>(
    mut tx: Transaction<'_, Postgres>,
    by: By<'_>,
    id: i64,
    detail: Value,
) -> ApiResult<Response> {
    sqlx::query(&format!("DELETE FROM {} WHERE id = $1", T::TABLE))
        .bind(id)
        .execute(&mut *tx)
        .await?;
    let revision = commit_row::<T>(tx, by, "delete", id, detail).await?;
    Ok(answer(revision, StatusCode::NO_CONTENT))
}

/// [`delete_row`] of row `id` of `T`, read and locked in `db` ([`lock_row`]); the audit row's
/// `detail` is made of the row as it was.
pub(super) async fn delete_locked<'c, T: TableRow>(
    db: impl Db<'c>,
    by: By<'_>,
    id: i64,
    detail: impl FnOnce(&T) -> Value,
) -> ApiResult<Response> {
    let (tx, current) = lock_row::<T>(db, id).await?;
    delete_row::<T>(tx, by, id, detail(&current)).await
}
