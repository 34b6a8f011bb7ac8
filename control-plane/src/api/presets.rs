//! `/api/v1/presets`: the provider presets a channel may name (`preset` on create) and the
//! built-in catalog prices each one's usage falls back on (setting `price_catalog`) where the
//! operator's own prices (`/api/v1/prices`, which always win) have no entry. Static data
//! (`switchyard_engine::catalog`), the same in every control plane and proxy of one version.

use axum::Json;
use serde::Serialize;
use switchyard_engine::catalog::{self, CatalogPrice, Preset};
use switchyard_engine::limit::format_micros;
use utoipa::ToSchema;

use super::schema::ProviderName;
use crate::error::{ApiResult, ErrorBody};

#[derive(Debug, Serialize, ToSchema)]
pub struct PresetList {
    /// The day the price catalog was compiled (`YYYY-MM-DD`); each price has its own date.
    pub catalog_date: String,
    pub presets: Vec<PresetView>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PresetView {
    pub name: String,
    /// The protocol the preset's channels speak.
    #[schema(value_type = ProviderName)]
    pub provider: String,
    /// The default `base_url`.
    pub base_url: String,
    /// `key`: a credential is required; `none`: a local server that checks none (a channel
    /// without a credential sends the placeholder `no-key`).
    pub auth: String,
    /// Whether the upstream has OpenAI's Responses API; `false`: Responses requests are
    /// translated into Chat Completions for it.
    pub responses_api: bool,
    /// Known quirks the gateway has no switch for.
    pub notes: String,
    /// The built-in prices of its models, most specific pattern first among equals.
    pub prices: Vec<CatalogPriceView>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CatalogPriceView {
    /// An upstream model name, or a pattern with `*`/`?` wildcards.
    pub model_pattern: String,
    /// USD per million input tokens, an exact decimal string.
    pub input_per_million: String,
    /// USD per million output tokens.
    pub output_per_million: String,
    /// USD per million cache-read input tokens; `null`: not published, charged as other input.
    pub cached_input_per_million: Option<String>,
    /// The date the source gave this price for.
    pub as_of: String,
    /// The provider's published pricing page.
    pub source: String,
}

fn price_view(p: &CatalogPrice) -> CatalogPriceView {
    CatalogPriceView {
        model_pattern: p.model_pattern.to_owned(),
        input_per_million: format_micros(p.input_per_million),
        output_per_million: format_micros(p.output_per_million),
        cached_input_per_million: p.cached_input_per_million.map(format_micros),
        as_of: p.as_of.to_owned(),
        source: p.source.to_owned(),
    }
}

fn preset_view(p: &Preset) -> PresetView {
    PresetView {
        name: p.name.to_owned(),
        provider: p.provider.to_owned(),
        base_url: p.base_url.to_owned(),
        auth: match p.auth {
            catalog::Auth::Key => "key",
            catalog::Auth::None => "none",
        }
        .to_owned(),
        responses_api: p.responses_api,
        notes: p.notes.to_owned(),
        prices: catalog::PRICES
            .iter()
            .filter(|price| price.preset == p.name)
            .map(price_view)
            .collect(),
    }
}

#[utoipa::path(get, path = "/api/v1/presets", tag = "channels", operation_id = "list_presets",
    responses((status = 200, body = PresetList), (status = 401, body = ErrorBody)))]
pub async fn list() -> ApiResult<Json<PresetList>> {
    Ok(Json(PresetList {
        catalog_date: catalog::CATALOG_DATE.to_owned(),
        presets: catalog::PRESETS.iter().map(preset_view).collect(),
    }))
}
