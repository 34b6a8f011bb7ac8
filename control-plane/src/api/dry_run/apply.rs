//! Each proposed change applied through its REST handler's code, in a savepoint of the
//! transaction it is given (a dry run's, or a configuration apply's), and a failure named by the
//! change (and the field in it) it comes from.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::request::{ChangeOp, ChangeResult, ProposedChange, ResourceKind};
use crate::api::extract::{parse_body, MAX_BODY_BYTES};
use crate::api::rows::By;
use crate::error::{ApiError, ApiResult};

/// Where in the request a failure of one change points.
enum Field {
    Op,
    Id,
    ParentId,
    Body,
}

/// A change that failed, and where in it the failure points.
pub(crate) struct ChangeError {
    field: Field,
    error: ApiError,
}

impl From<ApiError> for ChangeError {
    fn from(error: ApiError) -> ChangeError {
        ChangeError {
            field: Field::Body,
            error,
        }
    }
}

/// Names the change (and the field inside it) in a failure.
pub(super) fn at_change(index: usize, error: ChangeError) -> ApiError {
    let prefix = format!("changes[{index}]");
    at_place(&prefix, &format!("{prefix}.body"), error)
}

/// Names where a failed change stands: `prefix` is the change, `body` its body (a dry run's
/// `changes[i]` and `changes[i].body`; a configuration file's resource, `routes[2]`, for both).
pub(crate) fn at_place(
    prefix: &str,
    body: &str,
    ChangeError { field, error }: ChangeError,
) -> ApiError {
    let field_path = match field {
        Field::Op => format!("{prefix}.op"),
        Field::Id => format!("{prefix}.id"),
        Field::ParentId => format!("{prefix}.parent_id"),
        Field::Body => body.to_owned(),
    };
    match error {
        ApiError::Validation { param, message } => {
            let param = if param.is_empty() || param == "." {
                field_path
            } else if matches!(field, Field::Body) {
                format!("{field_path}.{param}")
            } else {
                field_path
            };
            ApiError::Validation {
                message: format!("{param}: {message}"),
                param,
            }
        }
        ApiError::BadRequest { param, message } => {
            let param = match param {
                Some(p) if matches!(field, Field::Body) => format!("{field_path}.{p}"),
                _ => field_path,
            };
            ApiError::Validation {
                message: format!("{param}: {message}"),
                param,
            }
        }
        ApiError::NotFound { resource, id } => ApiError::Validation {
            message: format!("{field_path}: {resource} {id} not found"),
            param: field_path,
        },
        ApiError::Conflict { message } => ApiError::Conflict {
            message: format!("{prefix}: {message}"),
        },
        other => other,
    }
}

fn required(value: Option<i64>, field: Field, what: &str) -> Result<i64, ChangeError> {
    let name = match field {
        Field::Op => "op",
        Field::Id => "id",
        Field::ParentId => "parent_id",
        Field::Body => "body",
    };
    value.ok_or_else(|| ChangeError {
        error: ApiError::validation("", format!("{name} is required {what}")),
        field,
    })
}

fn body<T: DeserializeOwned>(change: &ProposedChange) -> Result<T, ChangeError> {
    let value = change.body.clone().ok_or_else(|| ChangeError {
        field: Field::Body,
        error: ApiError::validation("", "body is required for this change"),
    })?;
    let bytes = serde_json::to_vec(&value)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("re-encoding a change body: {e}")))?;
    Ok(parse_body(&Bytes::from(bytes))?)
}

/// Applies one change through its REST handler's code, in a savepoint of `tx`: a dry run's
/// change, or one of the changes a configuration file makes.
pub(crate) async fn apply(
    tx: &mut sqlx::PgConnection,
    by: By<'_>,
    change: ProposedChange,
) -> Result<Response, ChangeError> {
    use ChangeOp::{Create, Delete, Patch, Put};
    let op_error = |message: String| ChangeError {
        field: Field::Op,
        error: ApiError::Validation {
            param: String::new(),
            message,
        },
    };
    match (change.resource, change.op) {
        (ResourceKind::Settings, Put) => {
            Ok(crate::api::settings::put_settings_in(tx, by, body(&change)?).await?)
        }
        (ResourceKind::Settings, Patch) => {
            Ok(crate::api::settings::patch_settings_in(tx, by, body(&change)?).await?)
        }
        (ResourceKind::Settings, op) => Err(op_error(format!(
            "settings take `put` or `patch`, not `{}`",
            op_name(op)
        ))),
        (_, Put) => Err(op_error("`put` applies to settings only".to_owned())),
        (_, Create) => create(tx, by, &change).await,
        (_, Patch) => {
            let id = required(change.id, Field::Id, "for a patch or delete")?;
            patch(tx, by, id, &change).await
        }
        (_, Delete) => {
            let id = required(change.id, Field::Id, "for a patch or delete")?;
            delete(tx, by, id, change.resource).await.map_err(on_id)
        }
    }
}

/// A failure naming the resource that is not there points at the change's `id`.
fn on_id(error: ApiError) -> ChangeError {
    let field = match error {
        ApiError::NotFound { .. } => Field::Id,
        _ => Field::Body,
    };
    ChangeError { field, error }
}

/// A failure naming the parent that is not there points at the change's `parent_id`.
fn on_parent(error: ApiError) -> ChangeError {
    let field = match error {
        ApiError::NotFound { .. } => Field::ParentId,
        _ => Field::Body,
    };
    ChangeError { field, error }
}

async fn create(
    tx: &mut sqlx::PgConnection,
    by: By<'_>,
    change: &ProposedChange,
) -> Result<Response, ChangeError> {
    use crate::api::{
        cache_rules, channels, credentials, guardrails, limits, members, prices, routes, shadows,
        teams, tokens, webhooks,
    };
    use ResourceKind as R;
    let response = match change.resource {
        R::Channel => channels::create_in(tx, by, body(change)?).await?,
        R::Credential => {
            let parent = required(change.parent_id, Field::ParentId, "to create a credential")?;
            let raw = body(change)?;
            credentials::create_in(tx, by, parent, raw)
                .await
                .map_err(on_parent)?
        }
        R::Route => routes::create_in(tx, by, body(change)?).await?,
        R::Member => {
            let parent = required(change.parent_id, Field::ParentId, "to create a member")?;
            let raw = body(change)?;
            members::create_in(tx, by, parent, raw)
                .await
                .map_err(on_parent)?
        }
        R::Token => tokens::create_in(tx, by, body(change)?).await?,
        R::Team => teams::create_in(tx, by, body(change)?).await?,
        R::Price => prices::create_in(tx, by, body(change)?).await?,
        R::Limit => limits::create_in(tx, by, body(change)?).await?,
        R::Shadow => shadows::create_in(tx, by, body(change)?).await?,
        R::CacheRule => cache_rules::create_in(tx, by, body(change)?).await?,
        R::Guardrail => guardrails::create_in(tx, by, body(change)?).await?,
        R::Webhook => webhooks::create_in(tx, by, body(change)?).await?,
        R::Settings => return Err(ApiError::validation("", "settings are never created").into()),
    };
    Ok(response)
}

async fn patch(
    tx: &mut sqlx::PgConnection,
    by: By<'_>,
    id: i64,
    change: &ProposedChange,
) -> Result<Response, ChangeError> {
    use crate::api::{
        cache_rules, channels, credentials, guardrails, limits, members, prices, routes, shadows,
        teams, tokens, webhooks,
    };
    use ResourceKind as R;
    let result = match change.resource {
        R::Channel => channels::patch_in(tx, None, by, id, body(change)?).await,
        R::Credential => credentials::patch_in(tx, by, id, body(change)?).await,
        R::Route => routes::patch_in(tx, by, id, body(change)?).await,
        R::Member => members::patch_in(tx, by, id, body(change)?).await,
        R::Token => tokens::patch_in(tx, by, id, body(change)?).await,
        R::Team => teams::patch_in(tx, by, id, body(change)?).await,
        R::Price => prices::patch_in(tx, by, id, body(change)?).await,
        R::Limit => limits::patch_in(tx, by, id, body(change)?).await,
        R::Shadow => shadows::patch_in(tx, by, id, body(change)?).await,
        R::CacheRule => cache_rules::patch_in(tx, by, id, body(change)?).await,
        R::Guardrail => guardrails::patch_in(tx, by, id, body(change)?).await,
        R::Webhook => webhooks::patch_in(tx, by, id, body(change)?).await,
        R::Settings => return Err(ApiError::validation("", "settings have no id").into()),
    };
    result.map_err(on_id)
}

async fn delete(
    tx: &mut sqlx::PgConnection,
    by: By<'_>,
    id: i64,
    resource: ResourceKind,
) -> ApiResult<Response> {
    use crate::api::{
        cache_rules, channels, credentials, guardrails, limits, members, prices, routes, shadows,
        teams, tokens, webhooks,
    };
    use ResourceKind as R;
    match resource {
        R::Channel => channels::delete_in(tx, by, id).await,
        R::Credential => credentials::delete_in(tx, by, id).await,
        R::Route => routes::delete_in(tx, by, id).await,
        R::Member => members::delete_in(tx, by, id).await,
        R::Token => tokens::delete_in(tx, by, id).await,
        R::Team => teams::delete_in(tx, by, id).await,
        R::Price => prices::delete_in(tx, by, id).await,
        R::Limit => limits::delete_in(tx, by, id).await,
        R::Shadow => shadows::delete_in(tx, by, id).await,
        R::CacheRule => cache_rules::delete_in(tx, by, id).await,
        R::Guardrail => guardrails::delete_in(tx, by, id).await,
        R::Webhook => webhooks::delete_in(tx, by, id).await,
        R::Settings => Err(ApiError::validation("", "settings are never deleted")),
    }
}

fn op_name(op: ChangeOp) -> &'static str {
    match op {
        ChangeOp::Create => "create",
        ChangeOp::Patch => "patch",
        ChangeOp::Delete => "delete",
        ChangeOp::Put => "put",
    }
}

pub(super) async fn result_of(index: usize, response: Response) -> ChangeResult {
    let status = response.status();
    let id = if status == StatusCode::CREATED {
        axum::body::to_bytes(response.into_body(), MAX_BODY_BYTES * 4)
            .await
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
            .and_then(|value| value.get("id").and_then(Value::as_i64))
    } else {
        None
    };
    ChangeResult {
        index,
        status: status.as_u16(),
        id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(field: Field, error: ApiError) -> ApiError {
        at_change(3, ChangeError { field, error })
    }

    /// The `param` and `message` of a 422.
    fn validation(error: ApiError) -> (String, String) {
        match error {
            ApiError::Validation { param, message } => (param, message),
            other => panic!("not a validation error: {other:?}"),
        }
    }

    #[test]
    fn a_validation_error_points_into_the_body_only_from_the_body() {
        let body = |param: &str| {
            validation(at(
                Field::Body,
                ApiError::Validation {
                    param: param.to_owned(),
                    message: "bad".to_owned(),
                },
            ))
        };
        assert_eq!(
            body("weight"),
            (
                "changes[3].body.weight".to_owned(),
                "changes[3].body.weight: bad".to_owned()
            )
        );
        // No field inside the body (or the body itself): the body.
        assert_eq!(body("").0, "changes[3].body");
        assert_eq!(body(".").0, "changes[3].body");
        // A failure of the id or the op never points into the body.
        for (field, path) in [
            (Field::Id, "changes[3].id"),
            (Field::ParentId, "changes[3].parent_id"),
            (Field::Op, "changes[3].op"),
        ] {
            let (param, _) = validation(at(field, ApiError::validation("weight", "bad")));
            assert_eq!(param, path);
        }
    }

    #[test]
    fn a_malformed_body_field_is_a_validation_error_at_its_place() {
        let (param, message) = validation(at(
            Field::Body,
            ApiError::bad_request(Some("colour"), "unknown field"),
        ));
        assert_eq!(param, "changes[3].body.colour");
        assert_eq!(message, "changes[3].body.colour: unknown field");
        let (param, _) = validation(at(Field::Body, ApiError::bad_request(None, "not JSON")));
        assert_eq!(param, "changes[3].body");
        let (param, _) = validation(at(Field::Id, ApiError::bad_request(Some("x"), "bad")));
        assert_eq!(param, "changes[3].id");
    }

    #[test]
    fn not_found_and_conflicts_name_the_change() {
        let (param, message) = validation(at(Field::Id, ApiError::not_found("route", 9)));
        assert_eq!(param, "changes[3].id");
        assert_eq!(message, "changes[3].id: route 9 not found");
        match at(
            Field::Body,
            ApiError::Conflict {
                message: "still used".to_owned(),
            },
        ) {
            ApiError::Conflict { message } => assert_eq!(message, "changes[3]: still used"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            at(Field::Body, ApiError::Unauthorized),
            ApiError::Unauthorized
        ));
    }

    #[test]
    fn an_op_is_named_as_the_api_spells_it() {
        for op in [
            ChangeOp::Create,
            ChangeOp::Patch,
            ChangeOp::Delete,
            ChangeOp::Put,
        ] {
            assert_eq!(
                serde_json::to_value(op).unwrap(),
                Value::from(op_name(op)),
                "{op:?}"
            );
        }
    }

    #[test]
    fn a_missing_id_names_the_field_it_is_for() {
        assert_eq!(required(Some(7), Field::Id, "to patch").ok(), Some(7));
        for (field, path, name) in [
            (Field::Id, "changes[3].id", "id"),
            (Field::ParentId, "changes[3].parent_id", "parent_id"),
        ] {
            let Err(error) = required(None, field, "for this") else {
                panic!("a missing value was accepted");
            };
            let (param, message) = validation(at_change(3, error));
            assert_eq!(param, path);
            assert!(
                message.contains(&format!("{name} is required for this")),
                "{message}"
            );
        }
    }
}
