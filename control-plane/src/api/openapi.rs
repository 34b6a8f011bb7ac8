//! Finishing touches on the generated OpenAPI document that hold for every operation, so no
//! handler can forget them: the admin token's 401 and the database's 503.

use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, Response, ResponseBuilder};

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
    for item in openapi.paths.paths.values_mut() {
        for operation in [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            let responses = &mut operation.responses.responses;
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

/// The admin API's OpenAPI document (what `/api/v1/openapi.json` serves).
pub fn document() -> OpenApi {
    super::openapi()
}
