//! Finishing touches on the generated OpenAPI document that hold for every operation, so no
//! handler can forget them: the admin token's 401, the database's 503, and each operation's
//! role (`x-switchyard-role`, with the 403 a lower role gets) and what an admin limited to one
//! team may do with it (`x-switchyard-team`: `open`, `own` (the team's resources only),
//! `filtered` (a report of the team only) or `fleet` (403 `outside_team`)), taken from the
//! tables the authorization middleware uses.

use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, Response, ResponseBuilder};

use super::access::{route_access, team_access, Role, RouteAccess, TeamAccess};

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
            let team = match team_access(&method, path) {
                Some(TeamAccess::Open) => "open",
                Some(TeamAccess::Own(_)) => "own",
                Some(TeamAccess::Filtered) => "filtered",
                None => "fleet",
            };
            let extensions = operation.extensions.get_or_insert_with(Extensions::default);
            extensions.insert("x-switchyard-role".to_owned(), role.as_str().into());
            extensions.insert("x-switchyard-team".to_owned(), team.into());
            let responses = &mut operation.responses.responses;
            let mut refusals = Vec::new();
            if role > Role::Viewer {
                refusals.push(format!(
                    "the admin token's role is below {} (`insufficient_role`)",
                    role.as_str()
                ));
            }
            if team == "fleet" {
                refusals.push(
                    "the admin token administers one team only, and this is for fleet admins \
                     (`outside_team`)"
                        .to_owned(),
                );
            }
            if team == "own" && method != axum::http::Method::GET {
                refusals.push(
                    "an admin limited to one team names, or would leave, something not of its \
                     team (`outside_team`)"
                        .to_owned(),
                );
            }
            if !refusals.is_empty() {
                responses
                    .entry("403".to_owned())
                    .or_insert_with(|| error_response(&refusals.join("; or ")));
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
