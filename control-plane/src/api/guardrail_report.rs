//! `GET /api/v1/guardrails/{id}/report`: what a guardrail checked and did — or, in shadow mode,
//! would have done — summed over the minutes the proxies reported (`guardrail_minutes`): counts,
//! findings by kind and a few masked examples, never a text.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::extract::Path;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

/// Examples a report shows at most.
const REPORT_EXAMPLES: usize = 5;

/// A guardrail's report.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct GuardrailReport {
    pub guardrail_id: i64,
    /// Requests and answers the guardrail checked.
    pub checked: i64,
    /// Blocked (enforce mode).
    pub blocked: i64,
    /// Would have been blocked (shadow mode).
    pub would_block: i64,
    /// Redacted (enforce mode).
    pub redacted: i64,
    /// Would have been redacted (shadow mode).
    pub would_redact: i64,
    /// External checks (webhook, moderation) that gave no verdict.
    pub external_failures: i64,
    /// Findings by kind (`email`, `card`, a pattern's name, `webhook`, a moderation category).
    pub findings: BTreeMap<String, i64>,
    /// A few examples of what matched, masked (`j***@e***.com`, `**** **** **** 4242`).
    pub examples: Vec<String>,
}

#[derive(sqlx::FromRow)]
struct Minute {
    checked: i64,
    blocked: i64,
    would_block: i64,
    redacted: i64,
    would_redact: i64,
    external_failures: i64,
    findings: sqlx::types::Json<BTreeMap<String, i64>>,
    examples: Vec<String>,
}

#[utoipa::path(get, path = "/api/v1/guardrails/{id}/report", tag = "guardrails",
    operation_id = "guardrail_report",
    responses((status = 200, body = GuardrailReport), (status = 404, body = ErrorBody)))]
pub async fn report(
    State(state): State<AppState>,
    Path(id): Path<i64>,
) -> ApiResult<Json<GuardrailReport>> {
    let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM guardrails WHERE id = $1)")
        .bind(id)
        .fetch_one(&state.pool)
        .await?;
    if !exists {
        return Err(ApiError::not_found("guardrail", id));
    }
    let minutes: Vec<Minute> = sqlx::query_as(
        "SELECT checked, blocked, would_block, redacted, would_redact, external_failures, \
         findings, examples FROM guardrail_minutes WHERE guardrail_id = $1 ORDER BY bucket",
    )
    .bind(id)
    .fetch_all(&state.pool)
    .await?;
    let mut report = GuardrailReport {
        guardrail_id: id,
        ..GuardrailReport::default()
    };
    for m in minutes {
        let sums = [
            (&mut report.checked, m.checked),
            (&mut report.blocked, m.blocked),
            (&mut report.would_block, m.would_block),
            (&mut report.redacted, m.redacted),
            (&mut report.would_redact, m.would_redact),
            (&mut report.external_failures, m.external_failures),
        ];
        for (total, n) in sums {
            *total = total.saturating_add(n);
        }
        for (kind, n) in m.findings.0 {
            let total = report.findings.entry(kind).or_default();
            *total = total.saturating_add(n);
        }
        let room = REPORT_EXAMPLES.saturating_sub(report.examples.len());
        report.examples.extend(m.examples.into_iter().take(room));
    }
    Ok(Json(report))
}
