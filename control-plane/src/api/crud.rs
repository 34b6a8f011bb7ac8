//! One shape for every resource's operations: `POST` on its collection (`/api/v1/{noun}s`, or a
//! parent's `/api/v1/{parent}s/{id}/{noun}s`), `GET` of a page of it, and `GET`, `PATCH` and
//! `DELETE` on `/api/v1/{noun}s/{id}`. A resource states its view, its create and patch bodies,
//! its parent and its OpenAPI facts once ([`Crud`], most through [`crud!`]); the handlers here are
//! generic over it, and [`created`], [`listed`] and [`item`] build both the axum routes and the
//! operations' OpenAPI entries from those facts, so the document lists exactly what the generic
//! handlers serve.

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

use super::access::{Caller, Owned};
use super::extract::{JsonBody, Path, Query, Writer};
use super::reply::{Page, PageQuery};
use super::rows::{fetch_row, fetch_view, list_rows, list_views, RowView, TableRow};
use crate::error::ApiResult;
use crate::state::AppState;

/// The OpenAPI facts of a resource's operations that differ from resource to resource.
#[derive(Clone, Copy)]
pub(super) struct Item {
    /// `route`: the paths `/api/v1/routes` and `/api/v1/routes/{id}`, the tag `routes`, the
    /// operation ids `create_route`, `list_routes`, `get_route`, `update_route` and `delete_route`.
    noun: &'static str,
    /// The 422 of a create or an update.
    invalid: &'static str,
    /// The 201 of a create.
    created: &'static str,
    /// Whether a create's operation lists the 400 of a malformed body.
    malformed: bool,
    /// The 204 of a delete.
    deleted: &'static str,
    /// The 409 of a delete, when something still refers to the resource.
    conflict: Option<&'static str>,
    /// How a row belongs to a team, when an admin limited to one team may see the resource:
    /// its list shows such a caller only its team's rows. `None`: fleet admins only.
    owned: Option<Owned>,
}

impl Item {
    pub(super) const fn new(noun: &'static str) -> Item {
        Item {
            noun,
            invalid: "",
            created: "",
            malformed: false,
            deleted: "",
            conflict: None,
            owned: None,
        }
    }

    /// A team admin may see the resource's rows of its team, `owned` telling which they are.
    pub(super) const fn owned(self, owned: Owned) -> Item {
        Item {
            owned: Some(owned),
            ..self
        }
    }

    /// What a create's or an update's 422 says.
    pub(super) const fn invalid(self, invalid: &'static str) -> Item {
        Item { invalid, ..self }
    }

    /// What a create's 201 says.
    pub(super) const fn created(self, created: &'static str) -> Item {
        Item { created, ..self }
    }

    /// A create's operation lists the 400 of a malformed body.
    pub(super) const fn malformed(self) -> Item {
        Item {
            malformed: true,
            ..self
        }
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

/// A resource served by the generic handlers: the view it answers with (`Self`), the bodies a
/// create and an update take, what a create answers, where it is created, and the resource
/// layer's create, update and delete (the `create_in` / `patch_in` / `delete_in` that applying a
/// configuration file and the dry run call too).
pub(super) trait Crud: RowView + Serialize + Send + 'static {
    type Create: DeserializeOwned + ToSchema + Send + 'static;
    /// The 201's body: the view, but for a token, whose plaintext is shown this once.
    type Created: ToSchema;
    /// `()` for a resource created at its own collection, or the view of the resource it is
    /// created under (see [`Parent`]).
    type Parent: Parent;
    type Patch: DeserializeOwned + ToSchema + Send + 'static;
    const ITEM: Item;

    fn create(
        w: Writer,
        parent: <Self::Parent as Parent>::Id,
        body: Self::Create,
    ) -> impl Future<Output = ApiResult<Response>> + Send;

    fn patch(
        state: AppState,
        w: Writer,
        id: i64,
        patch: Self::Patch,
    ) -> impl Future<Output = ApiResult<Response>> + Send;

    fn delete(w: Writer, id: i64) -> impl Future<Output = ApiResult<Response>> + Send;
}

/// Where a resource is created: at its own collection `/api/v1/{noun}s` (`()`), or under a
/// resource `P`, at `/api/v1/{P's noun}s/{id}/{noun}s` (`P`, a [`Crud`] view), where a
/// missing `P` is a 404 naming it.
pub(super) trait Parent: 'static {
    /// What the create's path names besides its collection: nothing, or the parent's id.
    type Id: Send;

    /// `V`'s collection path for `tag`, its `POST` route, and its OpenAPI operation `op` with
    /// what the path adds to it.
    fn post<V: Crud<Parent = Self>>(tag: &str, op: OperationBuilder) -> Post;
}

/// A `POST` route: its path, its OpenAPI operation and its handler.
type Post = (
    String,
    OperationBuilder,
    axum::routing::MethodRouter<AppState>,
);

impl Parent for () {
    type Id = ();

    fn post<V: Crud<Parent = ()>>(tag: &str, op: OperationBuilder) -> Post {
        let router = axum::routing::post(|w: Writer, JsonBody(body): JsonBody<V::Create>| {
            V::create(w, (), body)
        });
        (format!("/api/v1/{tag}"), op, router)
    }
}

impl<P: Crud> Parent for P {
    type Id = i64;

    fn post<V: Crud<Parent = P>>(tag: &str, op: OperationBuilder) -> Post {
        let router = axum::routing::post(
            |w: Writer, Path(parent): Path<i64>, JsonBody(body): JsonBody<V::Create>| {
                V::create(w, parent, body)
            },
        );
        let (path, op) = under::<P>(tag, op);
        (path, op, router)
    }
}

/// Implements [`Crud`] for `$view` (with the create body `$create`, the patch body `$patch` and
/// the facts `$item`) by the invoking module's `create_in`, `patch_in(db, by, id, patch)` and
/// `delete_in(db, by, id)`. `table` first: `$view` is read straight from its table (its own
/// [`RowView`]). `under $parent`: created under a `$parent`, by `create_in(db, by, parent_id,
/// body)`; else by `create_in(db, by, body)`, answering `$created` when it is given, else the view.
macro_rules! crud {
    (table $view:ident $($rest:tt)*) => {
        impl $crate::api::rows::RowView for $view {
            type Row = $view;
        }
        $crate::api::crud::crud!($view $($rest)*);
    };
    ($view:ident under $parent:ident, $create:ident, $patch:ident, $item:expr) => {
        $crate::api::crud::crud!(@impl $view, $parent, $create => $view, $patch, $item,
            |w, parent, body| create_in(&w.pool, w.by(), parent, body));
    };
    ($view:ident, $create:ident, $patch:ident, $item:expr) => {
        $crate::api::crud::crud!($view, $create => $view, $patch, $item);
    };
    ($view:ident, $create:ident => $created:ident, $patch:ident, $item:expr) => {
        $crate::api::crud::crud!(@impl $view, (), $create => $created, $patch, $item,
            |w, _parent, body| create_in(&w.pool, w.by(), body));
    };
    (@impl $view:ident, $parent:ty, $create:ident => $created:ident, $patch:ident, $item:expr,
        |$w:ident, $p:ident, $body:ident| $create_in:expr) => {
        impl $crate::api::crud::Crud for $view {
            type Create = $create;
            type Created = $created;
            type Parent = $parent;
            type Patch = $patch;
            const ITEM: $crate::api::crud::Item = $item;

            async fn create(
                $w: $crate::api::extract::Writer,
                $p: <$parent as $crate::api::crud::Parent>::Id,
                $body: $create,
            ) -> $crate::error::ApiResult<axum::response::Response> {
                $create_in.await
            }

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

/// `V`'s create, `POST` at its collection (see [`Parent`]), with its OpenAPI operation and the
/// schemas it names.
pub(super) fn created<V: Crud>() -> UtoipaMethodRouter<AppState> {
    let facts = V::ITEM;
    let tag = format!("{}s", facts.noun);
    let mut op = named(&tag, format!("create_{}", facts.noun))
        .request_body(Some(json_body::<V::Create>()))
        .response("201", json_response::<V::Created>(facts.created))
        .response("422", error(facts.invalid));
    if facts.malformed {
        op = op.response("400", error(""));
    }
    let (path, op, router) = V::Parent::post::<V>(&tag, op);
    let mut schemas = Vec::new();
    collect::<V::Create>(&mut schemas);
    collect::<V::Created>(&mut schemas);
    one(path, HttpMethod::Post, op, schemas, router)
}

/// `V`'s item route (get, update, delete) with its OpenAPI operations and the schemas they name.
pub(super) fn item<V: Crud>() -> UtoipaMethodRouter<AppState> {
    let Item {
        noun,
        invalid,
        deleted,
        conflict,
        ..
    } = V::ITEM;
    let tag = format!("{noun}s");
    let get = operation(&tag, "get", noun)
        .response("200", json_response::<V>(""))
        .response("404", error(""));
    let update = operation(&tag, "update", noun)
        .request_body(Some(json_body::<V::Patch>()))
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
    named(tag, format!("{verb}_{noun}")).parameter(id_parameter())
}

/// An operation tagged `tag` with the id `id`.
fn named(tag: &str, id: String) -> OperationBuilder {
    OperationBuilder::new().tag(tag).operation_id(Some(id))
}

/// A required JSON request body whose schema is `T`.
fn json_body<T: ToSchema>() -> utoipa::openapi::request_body::RequestBody {
    RequestBodyBuilder::new()
        .content(
            "application/json",
            content(Ref::from_schema_name(T::name())),
        )
        .required(Some(Required::True))
        .build()
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
    caller: Caller,
    Query(page): Query<PageQuery>,
) -> ApiResult<Json<Page<V>>> {
    let bounds = page.bounds()?;
    let team = match (caller.identity.team, V::ITEM.owned) {
        (None, _) => None,
        (Some(team), Some(owned)) => Some((owned, team)),
        (Some(team), None) => return Err(fleet_only(&caller, team)),
    };
    Ok(Json(list_views::<V>(&state.pool, team, bounds).await?))
}

/// The 403 of a team admin on what only fleet admins see (the access middleware refuses it
/// first; this keeps a generic handler from ever listing a resource no team owns).
fn fleet_only(caller: &Caller, team: i64) -> crate::error::ApiError {
    crate::error::ApiError::OutsideTeam {
        message: format!(
            "only fleet admins see this; the admin token {:?} administers team {team} only",
            caller.identity.name
        ),
    }
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
    let (path, op) = under::<P>(&tag, page_operation::<V>(&tag));
    let router = axum::routing::get(
        move |State(state): State<AppState>,
              caller: Caller,
              Path(parent): Path<i64>,
              Query(page): Query<PageQuery>| async move {
            if let Some(team) = caller.identity.team {
                return Err(fleet_only(&caller, team));
            }
            let bounds = page.bounds()?;
            fetch_row::<P::Row>(&state.pool, parent, false).await?;
            ApiResult::Ok(Json(
                list_rows::<V>(&state.pool, Some((column, parent)), bounds).await?,
            ))
        },
    );
    collection::<V>(path, op, router)
}

/// The path of the collection `tag` under a `P`, and `op` with the `{id}` it names and the 404 of
/// a missing `P`.
fn under<P: Crud>(tag: &str, op: OperationBuilder) -> (String, OperationBuilder) {
    let op = op.parameter(id_parameter()).response("404", error(""));
    (format!("/api/v1/{}s/{{id}}/{tag}", P::ITEM.noun), op)
}

/// `list_{tag}` answering a [`Page`] of `V`s.
fn page_operation<V: Crud>(tag: &str) -> OperationBuilder {
    named(tag, format!("list_{tag}"))
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
    // As utoipa names and writes a generic schema: `Page_{V}`, with `V` inline.
    let page = <Page<V> as utoipa::__dev::ComposeSchema>::compose(vec![V::schema()]);
    let mut schemas = vec![(page_name::<V>(), page)];
    <Page<V> as ToSchema>::schemas(&mut schemas);
    one(path, HttpMethod::Get, op, schemas, router)
}

/// The one operation `op` (`method` at `path`), served by `router`, with the schemas it names.
fn one(
    path: String,
    method: HttpMethod,
    op: OperationBuilder,
    schemas: Vec<(String, RefOr<utoipa::openapi::schema::Schema>)>,
    router: axum::routing::MethodRouter<AppState>,
) -> UtoipaMethodRouter<AppState> {
    let item = PathItemBuilder::new()
        .operation(method, Operation::from(op))
        .build();
    (
        schemas,
        PathsBuilder::new().path(path, item).build(),
        router,
    )
}
