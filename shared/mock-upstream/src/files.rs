//! OpenAI's Files and Batch APIs, in memory: `POST /v1/files` (multipart `file` and `purpose`),
//! `GET /v1/files`, `GET|DELETE /v1/files/{id}`, `GET /v1/files/{id}/content`; `POST
//! /v1/batches`, `GET /v1/batches`, `GET /v1/batches/{id}`, `POST /v1/batches/{id}/cancel`. A
//! batch is `validating` when created and completes on the first poll after: each line of its
//! input file is answered by the simulator ([`sim::batch_output_line`]) into an output file.
//! Anthropic's Message Batches API likewise (`/v1/messages/batches`, `/{id}`, `/{id}/results`,
//! `/{id}/cancel`, `DELETE /{id}`): a batch ends on the first poll after its creation. Ids are
//! this mock's own (`file-mock…`, `batch_mock…`, `msgbatch_mock…`); the shapes are
//! `switchyard-sim`'s.

use std::collections::BTreeMap;

use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::Value;
use switchyard_sim as sim;

use crate::respond::{full, MockBody};

/// One stored file.
struct File {
    bytes: Bytes,
    filename: String,
    purpose: String,
    created_at: u64,
}

/// The mock's files and batches.
#[derive(Default)]
pub(crate) struct Store {
    files: BTreeMap<String, File>,
    batches: BTreeMap<String, sim::BatchState>,
    /// Anthropic's message batches: the state, its requests and each request's result line
    /// (made when it ends).
    message_batches: BTreeMap<String, (sim::MessageBatchState, Vec<Value>, Vec<String>)>,
}

/// Whether `path` is one of the Files or Batch APIs' paths.
pub(crate) fn serves(path: &str) -> bool {
    ["/v1/files", "/v1/batches", "/v1/messages/batches"]
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")))
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn json(status: StatusCode, value: &Value) -> Response<MockBody> {
    full(status, "application/json", value.to_string())
}

fn not_found(what: &str) -> Response<MockBody> {
    let body = sim::openai_error_json(
        &format!("No such {what}"),
        "invalid_request_error",
        "not_found",
    );
    full(StatusCode::NOT_FOUND, "application/json", body)
}

fn bad_request(message: &str) -> Response<MockBody> {
    let body = sim::openai_error_json(message, "invalid_request_error", "invalid_request");
    full(StatusCode::BAD_REQUEST, "application/json", body)
}

impl Store {
    /// Answers one request to the Files or Batch API.
    pub(crate) fn handle(
        &mut self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &Bytes,
    ) -> Response<MockBody> {
        let parts: Vec<&str> = path.trim_start_matches("/v1/").split('/').collect();
        if let ["messages", "batches", rest @ ..] = parts.as_slice() {
            return self.message_batches(method, rest, body);
        }
        match (method, parts.as_slice()) {
            ("POST", ["files"]) => self.upload(content_type, body),
            ("GET", ["files"]) => json(
                StatusCode::OK,
                &sim::list_json(self.files.keys().map(|id| self.file(id)).collect()),
            ),
            ("GET", ["files", id]) if self.files.contains_key(*id) => {
                json(StatusCode::OK, &self.file(id))
            }
            ("GET", ["files", id, "content"]) => match self.files.get(*id) {
                Some(file) => full(
                    StatusCode::OK,
                    "application/octet-stream",
                    file.bytes.clone(),
                ),
                None => not_found("file"),
            },
            ("DELETE", ["files", id]) if self.files.remove(*id).is_some() => json(
                StatusCode::OK,
                &serde_json::json!({"id": id, "object": "file", "deleted": true}),
            ),
            ("GET" | "DELETE", ["files", ..]) => not_found("file"),
            ("POST", ["batches"]) => self.create_batch(body),
            ("GET", ["batches"]) => {
                let data = self.batches.values().map(sim::batch_json).collect();
                json(StatusCode::OK, &sim::list_json(data))
            }
            ("GET", ["batches", id]) => match self.poll(id) {
                Some(batch) => json(StatusCode::OK, &sim::batch_json(&batch)),
                None => not_found("batch"),
            },
            ("POST", ["batches", id, "cancel"]) => match self.batches.get_mut(*id) {
                Some(batch) => {
                    if batch.status != "completed" {
                        batch.status = "cancelled".into();
                        batch.cancelled_at = Some(now());
                    }
                    json(StatusCode::OK, &sim::batch_json(batch))
                }
                None => not_found("batch"),
            },
            _ => not_found("route"),
        }
    }

    /// Anthropic's Message Batches API (`/v1/messages/batches…`, `rest` after it).
    fn message_batches(&mut self, method: &str, rest: &[&str], body: &Bytes) -> Response<MockBody> {
        let missing = || {
            let body = sim::anthropic_error_json("No such message batch", "not_found_error");
            full(StatusCode::NOT_FOUND, "application/json", body)
        };
        match (method, rest) {
            ("POST", []) => self.create_message_batch(body),
            ("GET", []) => {
                let data = self
                    .message_batches
                    .values()
                    .map(|(b, _, _)| sim::message_batch_json(b))
                    .collect();
                json(StatusCode::OK, &sim::list_json(data))
            }
            ("GET", [id]) => match self.message_batches.get_mut(*id) {
                Some((batch, requests, results)) => {
                    if batch.processing_status != "ended" {
                        *results = requests
                            .iter()
                            .map(sim::message_batch_result_line)
                            .collect();
                        let ok = results
                            .iter()
                            .filter(|r| r.contains("\"succeeded\""))
                            .count() as u64;
                        batch.counts = (0, ok, results.len() as u64 - ok, 0);
                        batch.processing_status = "ended".into();
                        batch.results_url = Some(format!("/v1/messages/batches/{id}/results"));
                    }
                    json(StatusCode::OK, &sim::message_batch_json(batch))
                }
                None => missing(),
            },
            ("GET", [id, "results"]) => match self.message_batches.get(*id) {
                Some((batch, _, results)) if batch.processing_status == "ended" => {
                    let mut out = results.join("\n");
                    out.push('\n');
                    full(StatusCode::OK, "application/binary", out)
                }
                _ => missing(),
            },
            ("POST", [id, "cancel"]) => match self.message_batches.get_mut(*id) {
                Some((batch, _, _)) => {
                    if batch.processing_status != "ended" {
                        batch.processing_status = "canceling".into();
                        batch.cancel_initiated = true;
                    }
                    json(StatusCode::OK, &sim::message_batch_json(batch))
                }
                None => missing(),
            },
            ("DELETE", [id]) if self.message_batches.remove(*id).is_some() => json(
                StatusCode::OK,
                &serde_json::json!({"id": id, "type": "message_batch_deleted"}),
            ),
            _ => missing(),
        }
    }

    fn create_message_batch(&mut self, body: &Bytes) -> Response<MockBody> {
        let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let Some(requests) = request.get("requests").and_then(Value::as_array).cloned() else {
            let body =
                sim::anthropic_error_json("requests: Field required", "invalid_request_error");
            return full(StatusCode::BAD_REQUEST, "application/json", body);
        };
        let batch = sim::MessageBatchState {
            id: format!("msgbatch_mock{}", sim::next_id()),
            processing_status: "in_progress".into(),
            counts: (requests.len() as u64, 0, 0, 0),
            results_url: None,
            cancel_initiated: false,
        };
        let answer = sim::message_batch_json(&batch);
        self.message_batches
            .insert(batch.id.clone(), (batch, requests, Vec::new()));
        json(StatusCode::OK, &answer)
    }

    fn file(&self, id: &str) -> Value {
        match self.files.get(id) {
            Some(f) => sim::file_json(id, f.bytes.len(), f.created_at, &f.filename, &f.purpose),
            None => Value::Null,
        }
    }

    fn add_file(&mut self, bytes: Bytes, filename: &str, purpose: &str) -> String {
        let id = format!("file-mock{}", sim::next_id());
        let file = File {
            bytes,
            filename: filename.to_owned(),
            purpose: purpose.to_owned(),
            created_at: now(),
        };
        self.files.insert(id.clone(), file);
        id
    }

    fn upload(&mut self, content_type: &str, body: &Bytes) -> Response<MockBody> {
        let Some(boundary) = content_type
            .split(';')
            .find_map(|p| p.trim().strip_prefix("boundary="))
            .map(|b| b.trim_matches('"').to_owned())
        else {
            return bad_request("expected a multipart/form-data body");
        };
        let fields = multipart_fields(body, &boundary);
        let field = |name: &str| fields.iter().find(|(n, _, _)| n == name);
        let (Some((_, filename, bytes)), Some((_, _, purpose))) = (field("file"), field("purpose"))
        else {
            return bad_request("a file upload needs the fields `file` and `purpose`");
        };
        let purpose = String::from_utf8_lossy(purpose).into_owned();
        let filename = filename.clone().unwrap_or_else(|| "upload".to_owned());
        let id = self.add_file(bytes.clone(), &filename, &purpose);
        json(StatusCode::OK, &self.file(&id))
    }

    fn create_batch(&mut self, body: &Bytes) -> Response<MockBody> {
        let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let text = |k: &str| request.get(k).and_then(Value::as_str).map(str::to_owned);
        let Some(input_file_id) = text("input_file_id") else {
            return bad_request("`input_file_id` is required");
        };
        if !self.files.contains_key(&input_file_id) {
            return not_found("file");
        }
        let batch = sim::BatchState {
            id: format!("batch_mock{}", sim::next_id()),
            endpoint: text("endpoint").unwrap_or_else(|| "/v1/chat/completions".into()),
            input_file_id,
            completion_window: text("completion_window").unwrap_or_else(|| "24h".into()),
            status: "validating".into(),
            output_file_id: None,
            error_file_id: None,
            created_at: now(),
            completed_at: None,
            cancelled_at: None,
            counts: (0, 0, 0),
            metadata: request.get("metadata").cloned().unwrap_or(Value::Null),
        };
        let answer = sim::batch_json(&batch);
        self.batches.insert(batch.id.clone(), batch);
        json(StatusCode::OK, &answer)
    }

    /// The batch, completed now if it was still validating: every input line answered.
    fn poll(&mut self, id: &str) -> Option<sim::BatchState> {
        let batch = self.batches.get(id)?.clone();
        if batch.status != "validating" {
            return Some(batch);
        }
        let input = self
            .files
            .get(&batch.input_file_id)
            .map(|f| f.bytes.clone())
            .unwrap_or_default();
        let lines: Vec<String> = String::from_utf8_lossy(&input)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(sim::batch_output_line)
            .collect();
        let total = lines.len() as u64;
        let mut output = lines.join("\n");
        output.push('\n');
        let output_id = self.add_file(Bytes::from(output), "batch_output.jsonl", "batch_output");
        let batch = self.batches.get_mut(id)?;
        batch.status = "completed".into();
        batch.output_file_id = Some(output_id);
        batch.completed_at = Some(now());
        batch.counts = (total, total, 0);
        Some(batch.clone())
    }
}

/// The fields of a multipart form: (name, filename, bytes).
fn multipart_fields(body: &[u8], boundary: &str) -> Vec<(String, Option<String>, Bytes)> {
    let delimiter = format!("--{boundary}");
    let text = body;
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = find(rest, delimiter.as_bytes()) {
        rest = &rest[at + delimiter.len()..];
        if rest.starts_with(b"--") {
            break;
        }
        let Some(head_end) = find(rest, b"\r\n\r\n") else {
            break;
        };
        let head = String::from_utf8_lossy(&rest[..head_end]).into_owned();
        let content = &rest[head_end + 4..];
        let end = find(content, format!("\r\n{delimiter}").as_bytes()).unwrap_or(content.len());
        let disposition = head
            .split("\r\n")
            .find(|line| line.to_ascii_lowercase().starts_with("content-disposition"))
            .unwrap_or("")
            .to_owned();
        let param = |key: &str| {
            disposition
                .split(';')
                .find_map(|p| p.trim().strip_prefix(&format!("{key}=")))
                .map(|v| v.trim().trim_matches('"').to_owned())
        };
        if let Some(name) = param("name") {
            out.push((
                name,
                param("filename"),
                Bytes::copy_from_slice(&content[..end]),
            ));
        }
        rest = &content[end..];
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use http_body_util::BodyExt;

    use super::*;

    async fn body_of(response: Response<MockBody>) -> Value {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn a_batch_completes_on_the_first_poll_with_one_answer_per_line() {
        let mut store = Store::default();
        let form = "--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\nContent-Type: application/jsonl\r\n\r\n{\"custom_id\":\"a\",\"body\":{\"model\":\"m\"}}\n{\"custom_id\":\"b\",\"body\":{\"model\":\"m\"}}\n\r\n--b--\r\n";
        let file = body_of(store.handle(
            "POST",
            "/v1/files",
            "multipart/form-data; boundary=b",
            &Bytes::from(form),
        ))
        .await;
        assert_eq!(file["purpose"], "batch");
        assert_eq!(file["filename"], "in.jsonl");
        let id = file["id"].as_str().unwrap();
        let create = format!(
            r#"{{"input_file_id":"{id}","endpoint":"/v1/chat/completions","completion_window":"24h"}}"#
        );
        let batch = body_of(store.handle(
            "POST",
            "/v1/batches",
            "application/json",
            &Bytes::from(create),
        ))
        .await;
        assert_eq!(batch["status"], "validating");
        let polled = body_of(store.handle(
            "GET",
            &format!("/v1/batches/{}", batch["id"].as_str().unwrap()),
            "",
            &Bytes::new(),
        ))
        .await;
        assert_eq!(polled["status"], "completed");
        assert_eq!(polled["request_counts"]["completed"], 2);
        let output = store.handle(
            "GET",
            &format!(
                "/v1/files/{}/content",
                polled["output_file_id"].as_str().unwrap()
            ),
            "",
            &Bytes::new(),
        );
        let text = output.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(String::from_utf8_lossy(&text).lines().count(), 2);
        assert_eq!(
            store
                .handle("GET", "/v1/files/file-none", "", &Bytes::new())
                .status(),
            404
        );
    }

    #[tokio::test]
    async fn a_message_batch_ends_on_the_first_poll_with_a_result_per_request() {
        let mut store = Store::default();
        let create = r#"{"requests":[{"custom_id":"a","params":{"model":"claude-x","max_tokens":5,"messages":[]}},{"custom_id":"b","params":{}}]}"#;
        let batch = body_of(store.handle(
            "POST",
            "/v1/messages/batches",
            "application/json",
            &Bytes::from(create),
        ))
        .await;
        assert_eq!(batch["processing_status"], "in_progress");
        let id = batch["id"].as_str().unwrap().to_owned();
        let results = format!("/v1/messages/batches/{id}/results");
        assert_eq!(
            store.handle("GET", &results, "", &Bytes::new()).status(),
            404
        );
        let ended = body_of(store.handle(
            "GET",
            &format!("/v1/messages/batches/{id}"),
            "",
            &Bytes::new(),
        ))
        .await;
        assert_eq!(ended["processing_status"], "ended");
        assert_eq!(ended["request_counts"]["succeeded"], 1);
        assert_eq!(ended["request_counts"]["errored"], 1);
        let answer = store.handle("GET", &results, "", &Bytes::new());
        let text = answer.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(String::from_utf8_lossy(&text).lines().count(), 2);
    }
}
