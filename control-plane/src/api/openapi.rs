//! Finishing touches on the generated OpenAPI document that hold for every operation, so no
//! handler can forget them: the admin token's 401, the database's 503, and each operation's
//! role (`x-switchyard-role`, with the 403 a lower role gets), taken from the one table the
//! authorization middleware uses.

use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, Response, ResponseBuilder};

use super::access::{route_access, Role, RouteAccess};

fn error_response(description: &str) -> RefOr<Response> {
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build(),
    )
}

/// Adds the responses every admin operation can give (401 without the admin token, 503 while
/// the database or the first snapshot is unavailable) where a handler did not document them.
pub fn finish(mut openapi: OpenApi) -> OpenApi {
    for (path, item) in openapi.paths.paths.iter_mut() {
        for (method, operation) in [
            (axum::http::Method::GET, &mut item.get),
            (axum::http::Method::PUT, &mut item.put),
            (axum::http::Method::POST, &mut item.post),
            (axum::http::Method::DELETE, &mut item.delete),
            (axum::http::Method::PATCH, &mut item.patch),
        ]
        .into_iter()
        .filter_map(|(method, operation)| operation.as_mut().map(|op| (method, op)))
        {
            let role = match route_access(&method, path) {
                RouteAccess::Needs(role) => role,
                RouteAccess::OtherMethod => Role::Admin,
            };
            operation
                .extensions
                .get_or_insert_with(Extensions::default)
                .insert("x-switchyard-role".to_owned(), role.as_str().into());
            let responses = &mut operation.responses.responses;
            if role > Role::Viewer {
                responses.entry("403".to_owned()).or_insert_with(|| {
                    error_response(&format!(
                        "the admin token's role is below {} (`insufficient_role`)",
                        role.as_str()
                    ))
                });
            }
            responses
                .entry("401".to_owned())
                .or_insert_with(|| error_response("missing or invalid admin token"));
            responses.entry("503".to_owned()).or_insert_with(|| {
                error_response("the database is unavailable (proxies keep their last snapshot)")
            });
        }
    }
    openapi
}
