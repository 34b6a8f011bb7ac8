//! One shape for every resource's item operations: `GET`, `PATCH` and `DELETE` on
//! `/api/v1/{noun}s/{id}`. A resource states its view, its patch body and its OpenAPI facts once
//! ([`Crud`], most through [`crud!`]); the handlers here are generic over it, and [`item`] builds
//! both the axum route and the operations' OpenAPI entries from those facts, so the document lists
//! exactly what the generic handlers serve.

use std::future::Future;

use axum::extract::State;
use axum::response::Response;
use axum::Json;
use serde::de::DeserializeOwned;
use serde::Serialize;
use utoipa::openapi::path::{
    HttpMethod, Operation, OperationBuilder, Parameter, ParameterBuilder, ParameterIn,
    PathItemBuilder,
};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::{ContentBuilder, PathsBuilder, Ref, RefOr, Required, ResponseBuilder};
use utoipa::{IntoParams, PartialSchema, ToSchema};
use utoipa_axum::router::UtoipaMethodRouter;

use super::extract::{JsonBody, Path, Query, Writer};
use super::reply::{Page, PageQuery};
use super::rows::{fetch_row, fetch_view, list_rows, list_views, RowView, TableRow};
use crate::error::ApiResult;
use crate::state::AppState;

/// The OpenAPI facts of a resource's item operations that differ from resource to resource.
#[derive(Clone, Copy)]
pub(super) struct Item {
    /// `route`: the path `/api/v1/routes/{id}`, the tag `routes`, the operation ids `get_route`,
    /// `update_route` and `delete_route`.
    noun: &'static str,
    /// The 422 of an update.
    invalid: &'static str,
    /// The 204 of a delete.
    deleted: &'static str,
    /// The 409 of a delete, when something still refers to the resource.
    conflict: Option<&'static str>,
}

impl Item {
    pub(super) const fn new(noun: &'static str) -> Item {
        Item {
            noun,
            invalid: "",
            deleted: "",
            conflict: None,
        }
    }

    /// What an update's 422 says.
    pub(super) const fn invalid(self, invalid: &'static str) -> Item {
        Item { invalid, ..self }
    }

    /// What a delete's 204 says.
    pub(super) const fn deleted(self, deleted: &'static str) -> Item {
        Item { deleted, ..self }
    }

    /// A delete can be refused with a 409 that says this.
    pub(super) const fn conflict(self, conflict: &'static str) -> Item {
        Item {
            conflict: Some(conflict),
            ..self
        }
    }
}

/// A resource served by the generic item handlers: the view it answers with (`Self`), the body an
/// update takes, and the resource layer's update and delete (the `patch_in` / `delete_in` that
/// applying a configuration file and the dry run call too).
pub(super) trait Crud: RowView + Serialize + Send + 'static {
    type Patch: DeserializeOwned + ToSchema + Send + 'static;
    const ITEM: Item;

    fn patch(
        state: AppState,
        w: Writer,
        id: i64,
        patch: Self::Patch,
    ) -> impl Future<Output = ApiResult<Response>> + Send;

    fn delete(w: Writer, id: i64) -> impl Future<Output = ApiResult<Response>> + Send;
}

/// Implements [`Crud`] for `$view` (with `$patch` and the facts `$item`) by the invoking module's
/// `patch_in(db, by, id, patch)` and `delete_in(db, by, id)`. `table` first: `$view` is read
/// straight from its table (its own [`RowView`]).
macro_rules! crud {
    (table $view:ty, $patch:ty, $item:expr) => {
        impl $crate::api::rows::RowView for $view {
            type Row = $view;
        }
        $crate::api::crud::crud!($view, $patch, $item);
    };
    ($view:ty, $patch:ty, $item:expr) => {
        impl $crate::api::crud::Crud for $view {
            type Patch = $patch;
            const ITEM: $crate::api::crud::Item = $item;

            async fn patch(
                _: $crate::state::AppState,
                w: $crate::api::extract::Writer,
                id: i64,
                patch: $patch,
            ) -> $crate::error::ApiResult<axum::response::Response> {
                patch_in(&w.pool, w.by(), id, patch).await
            }

            async fn delete(
                w: $crate::api::extract::Writer,
                id: i64,
            ) -> $crate::error::ApiResult<axum::response::Response> {
                delete_in(&w.pool, w.by(), id).await
            }
        }
    };
}
pub(super) use crud;

async fn get_one<V: Crud>(
    State(state): State<AppState>,
    Path(id): Path<i64>,
) -> ApiResult<Json<V>> {
    Ok(Json(fetch_view::<V>(&state.pool, id).await?))
}

async fn patch<V: Crud>(
    State(state): State<AppState>,
    w: Writer,
    Path(id): Path<i64>,
    JsonBody(body): JsonBody<V::Patch>,
) -> ApiResult<Response> {
    V::patch(state, w, id, body).await
}

async fn delete<V: Crud>(w: Writer, Path(id): Path<i64>) -> ApiResult<Response> {
    V::delete(w, id).await
}

/// `V`'s item route (get, update, delete) with its OpenAPI operations and the schemas they name.
pub(super) fn item<V: Crud>() -> UtoipaMethodRouter<AppState> {
    let Item {
        noun,
        invalid,
        deleted,
        conflict,
    } = V::ITEM;
    let tag = format!("{noun}s");
    let get = operation(&tag, "get", noun)
        .response("200", json_response::<V>(""))
        .response("404", error(""));
    let update = operation(&tag, "update", noun)
        .request_body(Some(
            RequestBodyBuilder::new()
                .content(
                    "application/json",
                    content(Ref::from_schema_name(V::Patch::name())),
                )
                .required(Some(Required::True))
                .build(),
        ))
        .response("200", json_response::<V>(""))
        .response("404", error(""))
        .response("422", error(invalid));
    let mut delete_op = operation(&tag, "delete", noun)
        .response("204", ResponseBuilder::new().description(deleted).build())
        .response("404", error(""));
    if let Some(conflict) = conflict {
        delete_op = delete_op.response("409", error(conflict));
    }
    let path = PathItemBuilder::new()
        .operation(HttpMethod::Get, Operation::from(get))
        .operation(HttpMethod::Patch, Operation::from(update))
        .operation(HttpMethod::Delete, Operation::from(delete_op))
        .build();
    let mut schemas = Vec::new();
    collect::<V>(&mut schemas);
    collect::<V::Patch>(&mut schemas);
    let router = axum::routing::get(get_one::<V>)
        .patch(patch::<V>)
        .delete(delete::<V>);
    let paths = PathsBuilder::new()
        .path(format!("/api/v1/{tag}/{{id}}"), path)
        .build();
    (schemas, paths, router)
}

/// An operation on `/{tag}/{id}` with the id `{verb}_{noun}`.
fn operation(tag: &str, verb: &str, noun: &str) -> OperationBuilder {
    OperationBuilder::new()
        .tag(tag)
        .operation_id(Some(format!("{verb}_{noun}")))
        .parameter(id_parameter())
}

/// The `{id}` of a path.
fn id_parameter() -> Parameter {
    ParameterBuilder::new()
        .name("id")
        .parameter_in(ParameterIn::Path)
        .required(Required::True)
        .schema(Some(i64::schema()))
        .build()
}

fn content(schema: Ref) -> utoipa::openapi::Content {
    ContentBuilder::new().schema(Some(schema)).build()
}

/// A JSON response whose body is the schema `T`.
fn json_response<T: ToSchema>(description: &str) -> utoipa::openapi::Response {
    named_response(T::name(), description)
}

/// A JSON response whose body is the schema called `name`.
fn named_response(name: impl Into<String>, description: &str) -> utoipa::openapi::Response {
    ResponseBuilder::new()
        .description(description)
        .content("application/json", content(Ref::from_schema_name(name)))
        .build()
}

fn error(description: &str) -> utoipa::openapi::Response {
    json_response::<crate::error::ErrorBody>(description)
}

/// `T`'s schema and the schemas it refers to, as the OpenAPI components list them.
fn collect<T: ToSchema>(schemas: &mut Vec<(String, RefOr<utoipa::openapi::schema::Schema>)>) {
    schemas.push((T::name().into_owned(), T::schema()));
    T::schemas(schemas);
}

async fn list<V: Crud>(
    State(state): State<AppState>,
    Query(page): Query<PageQuery>,
) -> ApiResult<Json<Page<V>>> {
    Ok(Json(list_views::<V>(&state.pool, page.bounds()?).await?))
}

/// `V`'s collection `GET /api/v1/{noun}s`: a page of views, with its OpenAPI operation.
pub(super) fn listed<V: Crud>() -> UtoipaMethodRouter<AppState> {
    let tag = format!("{}s", V::ITEM.noun);
    let op = page_operation::<V>(&tag).response("401", error(""));
    let router = axum::routing::get(list::<V>);
    collection::<V>(format!("/api/v1/{tag}"), op, router)
}

/// `V`'s collection under a `P`: `GET /api/v1/{P's noun}s/{id}/{noun}s`, a page of the `V`s whose
/// `column` holds the id (a 404 naming `P` if there is no such `P`), with its OpenAPI operation.
pub(super) fn listed_under<P: Crud, V: Crud + TableRow>(
    column: &'static str,
) -> UtoipaMethodRouter<AppState> {
    let tag = format!("{}s", V::ITEM.noun);
    let op = page_operation::<V>(&tag)
        .parameter(id_parameter())
        .response("404", error(""));
    let router = axum::routing::get(
        move |State(state): State<AppState>,
              Path(parent): Path<i64>,
              Query(page): Query<PageQuery>| async move {
            let bounds = page.bounds()?;
            fetch_row::<P::Row>(&state.pool, parent, false).await?;
            ApiResult::Ok(Json(
                list_rows::<V>(&state.pool, Some((column, parent)), bounds).await?,
            ))
        },
    );
    let path = format!("/api/v1/{}s/{{id}}/{tag}", P::ITEM.noun);
    collection::<V>(path, op, router)
}

/// `list_{tag}` answering a [`Page`] of `V`s.
fn page_operation<V: Crud>(tag: &str) -> OperationBuilder {
    OperationBuilder::new()
        .tag(tag)
        .operation_id(Some(format!("list_{tag}")))
        .parameters(Some(PageQuery::into_params(|| Some(ParameterIn::Query))))
        .response("200", named_response(page_name::<V>(), ""))
}

fn page_name<V: ToSchema>() -> String {
    format!("Page_{}", V::name())
}

fn collection<V: Crud>(
    path: String,
    op: OperationBuilder,
    router: axum::routing::MethodRouter<AppState>,
) -> UtoipaMethodRouter<AppState> {
    let item = PathItemBuilder::new()
        .operation(HttpMethod::Get, Operation::from(op))
        .build();
    // As utoipa names and writes a generic schema: `Page_{V}`, with `V` inline.
    let page = <Page<V> as utoipa::__dev::ComposeSchema>::compose(vec![V::schema()]);
    let mut schemas = vec![(page_name::<V>(), page)];
    <Page<V> as ToSchema>::schemas(&mut schemas);
    (
        schemas,
        PathsBuilder::new().path(path, item).build(),
        router,
    )
}
