//! OpenAI's file and batch objects and a batch's output lines, as the Files and Batch APIs
//! answer them. The mock upstream keeps the state; these only say it.

use serde_json::{json, Value};

use crate::answer::{estimate_tokens, Answer, DEFAULT_CONTENT};
use crate::anthropic::anthropic_answer_json;
use crate::openai::chat_answer_json;
use crate::wire::next_id;

/// A file object: `{id, object: "file", bytes, created_at, filename, purpose, status:
/// "processed"}`.
pub fn file_json(id: &str, bytes: usize, created_at: u64, filename: &str, purpose: &str) -> Value {
    json!({
        "id": id,
        "object": "file",
        "bytes": bytes,
        "created_at": created_at,
        "filename": filename,
        "purpose": purpose,
        "status": "processed",
        "status_details": null,
        "expires_at": null
    })
}

/// What one batch is, for [`batch_json`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchState {
    pub id: String,
    pub endpoint: String,
    pub input_file_id: String,
    pub completion_window: String,
    /// `validating`, `in_progress`, `completed`, `cancelled` …
    pub status: String,
    pub output_file_id: Option<String>,
    pub error_file_id: Option<String>,
    pub created_at: u64,
    pub completed_at: Option<u64>,
    pub cancelled_at: Option<u64>,
    /// (total, completed, failed)
    pub counts: (u64, u64, u64),
    pub metadata: Value,
}

/// A batch object in the Batch API's shape.
pub fn batch_json(batch: &BatchState) -> Value {
    json!({
        "id": batch.id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "errors": null,
        "input_file_id": batch.input_file_id,
        "completion_window": batch.completion_window,
        "status": batch.status,
        "output_file_id": batch.output_file_id,
        "error_file_id": batch.error_file_id,
        "created_at": batch.created_at,
        "in_progress_at": batch.completed_at,
        "expires_at": batch.created_at + 86_400,
        "finalizing_at": batch.completed_at,
        "completed_at": batch.completed_at,
        "failed_at": null,
        "expired_at": null,
        "cancelling_at": batch.cancelled_at,
        "cancelled_at": batch.cancelled_at,
        "request_counts": {
            "total": batch.counts.0,
            "completed": batch.counts.1,
            "failed": batch.counts.2
        },
        "metadata": batch.metadata
    })
}

/// A list page: `{object: "list", data, first_id, last_id, has_more: false}`.
pub fn list_json(data: Vec<Value>) -> Value {
    let id = |v: Option<&Value>| v.and_then(|v| v.get("id")).cloned().unwrap_or(Value::Null);
    json!({
        "object": "list",
        "first_id": id(data.first()),
        "last_id": id(data.last()),
        "data": data,
        "has_more": false
    })
}

/// The output line of one batch request (a JSONL line of the input file): the simulated chat
/// answer to its `body` (its model, a prompt counted from the body) as the Batch API writes it,
/// `{id, custom_id, response: {status_code: 200, request_id, body}, error: null}`; a line that
/// is not a request object gets a 400 `response` saying so.
pub fn batch_output_line(line: &str) -> String {
    let request: Value = serde_json::from_str(line).unwrap_or(Value::Null);
    let custom_id = request.get("custom_id").cloned().unwrap_or(Value::Null);
    let body = request.get("body");
    let (status, answer) = match body.and_then(|b| b.get("model")).and_then(Value::as_str) {
        Some(model) => {
            let prompt = body.map(Value::to_string).unwrap_or_default();
            let answer =
                Answer::new(model, DEFAULT_CONTENT).prompt_tokens(estimate_tokens(&prompt).max(1));
            let json: Value =
                serde_json::from_str(&chat_answer_json(&answer)).unwrap_or(Value::Null);
            (200, json)
        }
        None => (
            400,
            json!({"error": {"message": "each line needs a body with a model", "type": "invalid_request_error"}}),
        ),
    };
    json!({
        "id": format!("batch_req_mock_{}", next_id()),
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": format!("req_mock_{}", next_id()), "body": answer},
        "error": null
    })
    .to_string()
}

/// What one Anthropic message batch is, for [`message_batch_json`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageBatchState {
    pub id: String,
    /// `in_progress`, `canceling` or `ended`.
    pub processing_status: String,
    /// (processing, succeeded, errored, canceled)
    pub counts: (u64, u64, u64, u64),
    /// Where its results are (set once it ended).
    pub results_url: Option<String>,
    pub cancel_initiated: bool,
}

/// The mock's fixed times (RFC 3339): a batch made now says it was made then.
const CREATED_AT: &str = "2025-01-01T00:00:00Z";
const ENDED_AT: &str = "2025-01-01T00:00:01Z";
const EXPIRES_AT: &str = "2025-01-02T00:00:00Z";

/// A message batch in the Message Batches API's shape.
pub fn message_batch_json(batch: &MessageBatchState) -> Value {
    let ended = batch.processing_status == "ended";
    json!({
        "id": batch.id,
        "type": "message_batch",
        "processing_status": batch.processing_status,
        "request_counts": {
            "processing": batch.counts.0,
            "succeeded": batch.counts.1,
            "errored": batch.counts.2,
            "canceled": batch.counts.3,
            "expired": 0
        },
        "ended_at": if ended { Value::from(ENDED_AT) } else { Value::Null },
        "created_at": CREATED_AT,
        "expires_at": EXPIRES_AT,
        "archived_at": null,
        "cancel_initiated_at": if batch.cancel_initiated { Value::from(CREATED_AT) } else { Value::Null },
        "results_url": batch.results_url
    })
}

/// The result line of one message batch request (`{custom_id, params}`): the simulated
/// Anthropic message answering its `params`, `{custom_id, result: {type: "succeeded",
/// message}}`; a request without `params.model` gets an `errored` result.
pub fn message_batch_result_line(request: &Value) -> String {
    let custom_id = request.get("custom_id").cloned().unwrap_or(Value::Null);
    let params = request.get("params");
    let result = match params.and_then(|p| p.get("model")).and_then(Value::as_str) {
        Some(model) => {
            let prompt = params.map(Value::to_string).unwrap_or_default();
            let answer =
                Answer::new(model, DEFAULT_CONTENT).prompt_tokens(estimate_tokens(&prompt).max(1));
            let message: Value =
                serde_json::from_str(&anthropic_answer_json(&answer)).unwrap_or(Value::Null);
            json!({"type": "succeeded", "message": message})
        }
        None => json!({
            "type": "errored",
            "error": {"type": "error", "error": {"type": "invalid_request_error", "message": "params.model: Field required"}}
        }),
    };
    json!({"custom_id": custom_id, "result": result}).to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn an_output_line_answers_its_request_with_usage() {
        let line = r#"{"custom_id":"r1","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}}"#;
        let out: Value = serde_json::from_str(&batch_output_line(line)).unwrap();
        assert_eq!(out["custom_id"], "r1");
        assert_eq!(out["response"]["status_code"], 200);
        assert_eq!(out["response"]["body"]["model"], "gpt-x");
        assert!(
            out["response"]["body"]["usage"]["prompt_tokens"]
                .as_u64()
                .unwrap()
                > 0
        );
        let bad: Value = serde_json::from_str(&batch_output_line("{}")).unwrap();
        assert_eq!(bad["response"]["status_code"], 400);
    }

    #[test]
    fn a_message_batch_result_answers_its_params_with_usage() {
        let request = json!({"custom_id": "q", "params": {"model": "claude-x", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}});
        let out: Value = serde_json::from_str(&message_batch_result_line(&request)).unwrap();
        assert_eq!(out["custom_id"], "q");
        assert_eq!(out["result"]["type"], "succeeded");
        assert_eq!(out["result"]["message"]["model"], "claude-x");
        assert!(
            out["result"]["message"]["usage"]["input_tokens"]
                .as_u64()
                .unwrap()
                > 0
        );
        let bad: Value =
            serde_json::from_str(&message_batch_result_line(&json!({"custom_id": "r"}))).unwrap();
        assert_eq!(bad["result"]["type"], "errored");
    }
}
