//! `GET /api/v1/cache_rules/{id}/trial`: a semantic cache rule's report — what its lookups by
//! meaning found, summed over every minute the proxies reported: requests looked up, those a
//! stored prompt matched at the threshold (would have been served; served, for a `serve` rule),
//! those whose live answer agreed with the stored one, the mean score of the matches and the
//! mean text similarity of the compared answers.

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::cache_rules::CacheRuleRow;
use super::extract::Path;
use super::rows::fetch_row;
use crate::db::ts;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

/// A semantic cache rule's trial report (zeros and nulls before any report).
#[derive(Debug, Serialize, ToSchema)]
pub struct TrialReport {
    pub rule_id: i64,
    /// `trial` or `serve`.
    pub mode: String,
    /// Requests looked up by meaning (after an exact miss).
    pub looked_up: i64,
    /// Those a stored prompt matched at the threshold.
    pub would_hit: i64,
    /// Trial matches whose live answer agreed with the stored one: the same finish reason and
    /// tool names, and a text similarity of at least 0.9.
    pub agreed: i64,
    /// Mean cosine similarity of the matches (`null`: none yet).
    pub mean_score: Option<f64>,
    /// Mean text similarity (0 to 1) of the compared answers (`null`: none yet).
    pub mean_similarity: Option<f64>,
    /// The first and last minute with a lookup (RFC 3339), `null` before any.
    #[schema(format = DateTime)]
    pub first_seen: Option<String>,
    #[schema(format = DateTime)]
    pub last_seen: Option<String>,
}

#[derive(sqlx::FromRow)]
struct Totals {
    looked_up: i64,
    would_hit: i64,
    compared: i64,
    agreed: i64,
    score_milli_sum: i64,
    similarity_milli_sum: i64,
    first_seen: Option<String>,
    last_seen: Option<String>,
}

#[utoipa::path(get, path = "/api/v1/cache_rules/{id}/trial", tag = "cache_rules",
    operation_id = "cache_rule_trial",
    responses((status = 200, body = TrialReport), (status = 404, body = ErrorBody),
              (status = 409, description = "the rule has no semantic part", body = ErrorBody)))]
pub async fn trial(
    State(state): State<AppState>,
    Path(id): Path<i64>,
) -> ApiResult<Json<TrialReport>> {
    let row = fetch_row::<CacheRuleRow>(&state.pool, id, false).await?;
    let Some(mode) = row.semantic_mode().filter(|_| row.has_semantic()) else {
        return Err(ApiError::Conflict {
            message: format!("cache rule {id} has no semantic part: it has no trial report"),
        });
    };
    let sql = format!(
        "SELECT coalesce(sum(looked_up), 0)::bigint AS looked_up, \
         coalesce(sum(would_hit), 0)::bigint AS would_hit, \
         coalesce(sum(compared), 0)::bigint AS compared, \
         coalesce(sum(agreed), 0)::bigint AS agreed, \
         coalesce(sum(score_milli_sum), 0)::bigint AS score_milli_sum, \
         coalesce(sum(similarity_milli_sum), 0)::bigint AS similarity_milli_sum, \
         {} AS first_seen, {} AS last_seen \
         FROM semantic_trial_minutes WHERE cache_rule_id = $1 AND looked_up > 0",
        ts("min(bucket)"),
        ts("max(bucket)")
    );
    let t: Totals = sqlx::query_as(&sql).bind(id).fetch_one(&state.pool).await?;
    // Thousandths in, a mean rounded to three decimals out.
    let mean = |sum: i64, n: i64| (n > 0).then(|| (sum as f64 / n as f64).round() / 1000.0);
    Ok(Json(TrialReport {
        rule_id: id,
        mode: mode.to_owned(),
        looked_up: t.looked_up,
        would_hit: t.would_hit,
        agreed: t.agreed,
        mean_score: mean(t.score_milli_sum, t.would_hit),
        mean_similarity: mean(t.similarity_milli_sum, t.compared),
        first_seen: t.first_seen,
        last_seen: t.last_seen,
    }))
}
