//! Every admin request body checked as its handler checks it before touching the database, for
//! the fuzz targets (`fuzz/`): hostile bodies must come back as a 400 or 422.

use axum::body::Bytes;

use super::extract::parse_body;
use super::{channels, credentials, limits, members, prices, routes, settings, teams, tokens};
use crate::error::{ApiError, ApiResult};

/// An admin request body [`validate_body`] checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    ChannelCreate,
    ChannelPatch,
    CredentialCreate,
    CredentialPatch,
    RouteCreate,
    RoutePatch,
    MemberCreate,
    MemberPatch,
    TeamCreate,
    TeamPatch,
    TokenCreate,
    TokenPatch,
    PriceCreate,
    PricePatch,
    LimitCreate,
    LimitPatch,
    /// `PUT /api/v1/settings`.
    Settings,
}

impl BodyKind {
    pub const ALL: [BodyKind; 17] = [
        BodyKind::ChannelCreate,
        BodyKind::ChannelPatch,
        BodyKind::CredentialCreate,
        BodyKind::CredentialPatch,
        BodyKind::RouteCreate,
        BodyKind::RoutePatch,
        BodyKind::MemberCreate,
        BodyKind::MemberPatch,
        BodyKind::TeamCreate,
        BodyKind::TeamPatch,
        BodyKind::TokenCreate,
        BodyKind::TokenPatch,
        BodyKind::PriceCreate,
        BodyKind::PricePatch,
        BodyKind::LimitCreate,
        BodyKind::LimitPatch,
        BodyKind::Settings,
    ];
}

/// Parses and validates an admin body as its handler does before touching the database. A
/// create body (or a settings document) gives its validated spec as the audit log records it
/// (no secret, no header value); a patch body is only parsed (its validation needs the stored
/// row) and gives `null`. Used by the fuzz targets (`fuzz/`): hostile bodies must come back as a
/// 400 or 422.
pub fn validate_body(kind: BodyKind, body: &Bytes) -> ApiResult<serde_json::Value> {
    use serde_json::Value;
    match kind {
        BodyKind::ChannelCreate => channels::create_detail(parse_body(body)?),
        BodyKind::CredentialCreate => credentials::create_detail(parse_body(body)?),
        BodyKind::RouteCreate => routes::create_detail(parse_body(body)?),
        BodyKind::MemberCreate => members::create_detail(parse_body(body)?),
        BodyKind::TeamCreate => teams::create_detail(parse_body(body)?),
        BodyKind::TokenCreate => tokens::create_detail(parse_body(body)?),
        BodyKind::PriceCreate => prices::create_detail(parse_body(body)?),
        BodyKind::LimitCreate => limits::create_detail(parse_body(body)?),
        BodyKind::Settings => {
            let settings = settings::merge_settings(serde_json::Map::new(), parse_body(body)?)?;
            serde_json::to_value(settings)
                .map_err(|e| ApiError::Internal(anyhow::anyhow!("settings: {e}")))
        }
        BodyKind::ChannelPatch => parse_body::<channels::ChannelPatch>(body).map(|_| Value::Null),
        BodyKind::CredentialPatch => {
            parse_body::<credentials::CredentialPatch>(body).map(|_| Value::Null)
        }
        BodyKind::RoutePatch => parse_body::<routes::RoutePatch>(body).map(|_| Value::Null),
        BodyKind::MemberPatch => parse_body::<members::MemberPatch>(body).map(|_| Value::Null),
        BodyKind::TeamPatch => parse_body::<teams::TeamPatch>(body).map(|_| Value::Null),
        BodyKind::TokenPatch => parse_body::<tokens::TokenPatch>(body).map(|_| Value::Null),
        BodyKind::PricePatch => parse_body::<prices::PricePatch>(body).map(|_| Value::Null),
        BodyKind::LimitPatch => parse_body::<limits::LimitPatch>(body).map(|_| Value::Null),
    }
}
