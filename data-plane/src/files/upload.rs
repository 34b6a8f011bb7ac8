//! Where an upload goes: its model (a batch file's first line's `body.model`, every line naming
//! one; another file's `x-switchyard-model` header) routed as a request for that model would
//! be — route rules, the key's team and route group — among the channels that can keep files:
//! OpenAI-protocol channels with a base URL (not Azure's, whose Files API lives elsewhere, nor
//! the in-process simulator).

use std::borrow::Cow;

use http::{header, HeaderMap, HeaderName};
use serde::Deserialize;
use switchyard_engine::{
    select, Channel, Outcome, Provider, RequestNeeds, Route, SelectionConstraint, SplitMix64,
    Token, AZURE_BIT,
};
use switchyard_provider::Protocol;
use switchyard_state::unix_ms;

use crate::errors::GatewayError;
use crate::request::{multipart_fields, route_group, InspectError, MAX_MODEL_LEN};
use crate::snapshot::View;
use crate::state::AppState;

/// The header naming the model a file other than a batch file is routed by.
pub const MODEL_HEADER: HeaderName = HeaderName::from_static("x-switchyard-model");

/// The most request lines a batch file may have (OpenAI's own bound).
pub const MAX_BATCH_LINES: usize = 50_000;

/// What an upload says about itself.
#[derive(Debug, PartialEq, Eq)]
pub struct Upload {
    pub purpose: String,
    /// The model it is routed by.
    pub model: String,
}

/// Reads an upload's form: its `purpose`, its `file`, and the model it is routed by.
pub fn read(headers: &HeaderMap, body: &[u8]) -> Result<Upload, GatewayError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !content_type
        .to_ascii_lowercase()
        .starts_with("multipart/form-data")
    {
        return Err(GatewayError::InvalidRequest(
            "a file upload is a multipart/form-data body with the fields `file` and `purpose`"
                .into(),
        ));
    }
    let [purpose, file] =
        multipart_fields(body, content_type, ["purpose", "file"]).map_err(|e| {
            GatewayError::InvalidRequest(match e {
                InspectError::Malformed(message) | InspectError::Attribution(message) => message,
                InspectError::DuplicateField(field) => {
                    format!("the multipart body has more than one `{field}` field; send it once")
                }
                InspectError::MissingModel => "the upload names no model".into(),
            })
        })?;
    let purpose = purpose
        .map(|(start, end)| String::from_utf8_lossy(&body[start..end]).trim().to_owned())
        .filter(|p| !p.is_empty())
        .ok_or_else(|| GatewayError::InvalidRequest("the upload needs a `purpose` field".into()))?;
    let (start, end) =
        file.ok_or_else(|| GatewayError::InvalidRequest("the upload needs a `file` field".into()))?;
    let model = if purpose == "batch" {
        batch_model(&body[start..end])?
    } else {
        header_model(headers)?
    };
    Ok(Upload { purpose, model })
}

/// The model of a batch file: its first request line's `body.model`; every line must name one.
fn batch_model(file: &[u8]) -> Result<String, GatewayError> {
    #[derive(Deserialize)]
    struct Line<'a> {
        #[serde(borrow)]
        body: Option<LineBody<'a>>,
    }
    #[derive(Deserialize)]
    struct LineBody<'a> {
        #[serde(borrow)]
        model: Option<Cow<'a, str>>,
    }
    let mut first = None;
    let mut lines = 0usize;
    for (number, line) in file.split(|b| *b == b'\n').enumerate() {
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        lines += 1;
        if lines > MAX_BATCH_LINES {
            return Err(GatewayError::InvalidRequest(format!(
                "the batch file has more than {MAX_BATCH_LINES} requests"
            )));
        }
        let model = serde_json::from_slice::<Line<'_>>(line)
            .ok()
            .and_then(|l| l.body?.model)
            .filter(|m| !m.trim().is_empty() && m.len() <= MAX_MODEL_LEN)
            .ok_or_else(|| {
                GatewayError::InvalidRequest(format!(
                    "line {} of the batch file names no `body.model` (at most {MAX_MODEL_LEN} bytes); every request must name its model, the first one's routes the file",
                    number + 1
                ))
            })?;
        if first.is_none() {
            first = Some(model.trim().to_owned());
        }
    }
    first.ok_or_else(|| GatewayError::InvalidRequest("the batch file has no request lines".into()))
}

/// The model a file other than a batch file names in [`MODEL_HEADER`].
fn header_model(headers: &HeaderMap) -> Result<String, GatewayError> {
    headers
        .get(&MODEL_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|m| !m.is_empty() && m.len() <= MAX_MODEL_LEN)
        .map(str::to_owned)
        .ok_or_else(|| {
            GatewayError::InvalidRequest(format!(
                "name the model this file is for in the `{MODEL_HEADER}` header: the gateway keeps a file on a channel serving that model (a `batch` file is routed by its requests' model)"
            ))
        })
}

/// The channel an upload (or a message batch) for `model` goes to, and the route it was chosen
/// by, chosen by the engine as for a request, among the channels of `protocol` that keep files and batches: those with a base
/// URL of the protocol's own API (OpenAI's: not Azure; Anthropic's: not Bedrock; never the
/// in-process simulator).
pub fn choose<'v>(
    state: &AppState,
    view: &'v View,
    token: &Token,
    headers: &HeaderMap,
    model: &str,
    protocol: Protocol,
) -> Result<(&'v Channel, Option<&'v Route>), GatewayError> {
    let snapshot = &*view.snapshot;
    let (unsupported, without) = match protocol {
        Protocol::Anthropic => (
            Provider::Openai.protocol_bit() | Provider::Gemini.protocol_bit(),
            Provider::Bedrock,
        ),
        _ => (
            Provider::Anthropic.protocol_bit() | Provider::Gemini.protocol_bit() | AZURE_BIT,
            Provider::Azure,
        ),
    };
    let constraint = SelectionConstraint {
        route_group: route_group(token, headers),
        team: token.team_id,
        needs: RequestNeeds {
            unsupported_providers: unsupported,
            ..RequestNeeds::default()
        },
        excluded_channels: snapshot
            .channels()
            .filter(|c| c.provider == Provider::Mock || c.provider == without)
            .map(|c| c.id)
            .collect(),
        ..SelectionConstraint::default()
    };
    let mut rng = SplitMix64::new(state.next_seed());
    let (mut outcome, mut route) = (Outcome::ModelNotFound, None);
    state.store.with_view(&mut |health| {
        let decision = select(snapshot, health, &constraint, model, unix_ms(), &mut rng);
        (outcome, route) = (decision.outcome, decision.route);
    });
    let model = model.to_owned();
    match outcome {
        Outcome::Selected { channel_id, .. } => snapshot
            .channel(channel_id)
            .map(|channel| (channel, route))
            .ok_or(GatewayError::NoEligibleMember {
                model,
                secrets_withheld: false,
            }),
        Outcome::ModelNotFound => Err(GatewayError::ModelNotFound { model }),
        Outcome::ModelNotAllowed => Err(GatewayError::ModelNotAllowed { model }),
        _ => Err(GatewayError::NoEligibleMember {
            model,
            secrets_withheld: false,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(purpose: &str, file: &str) -> (HeaderMap, Vec<u8>) {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            http::HeaderValue::from_static("multipart/form-data; boundary=b"),
        );
        let body = format!("--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n{purpose}\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n{file}\r\n--b--\r\n");
        (headers, body.into_bytes())
    }

    #[test]
    fn a_batch_file_is_routed_by_its_first_lines_model() {
        let lines = "{\"custom_id\":\"1\",\"body\":{\"model\":\"gpt-a\"}}\n\n{\"custom_id\":\"2\",\"body\":{\"model\":\"gpt-b\"}}\n";
        let (headers, body) = form("batch", lines);
        assert_eq!(
            read(&headers, &body),
            Ok(Upload {
                purpose: "batch".into(),
                model: "gpt-a".into()
            })
        );
    }

    #[test]
    fn every_batch_line_must_name_a_model() {
        for (lines, line) in [
            ("{\"body\":{\"model\":\"m\"}}\n{\"body\":{}}\n", "line 2"),
            ("not json\n", "line 1"),
            ("{\"body\":{\"model\":\"\"}}", "line 1"),
        ] {
            let (headers, body) = form("batch", lines);
            let Err(GatewayError::InvalidRequest(message)) = read(&headers, &body) else {
                panic!("{lines:?} accepted");
            };
            assert!(message.contains(line), "{message}");
        }
        let (headers, body) = form("batch", "\n\n");
        assert!(
            matches!(read(&headers, &body), Err(GatewayError::InvalidRequest(m)) if m.contains("no request lines"))
        );
    }

    #[test]
    fn another_file_names_its_model_in_the_header() {
        let (mut headers, body) = form("assistants", "anything");
        let Err(GatewayError::InvalidRequest(message)) = read(&headers, &body) else {
            panic!("accepted without a model");
        };
        assert!(message.contains("x-switchyard-model"), "{message}");
        headers.insert(MODEL_HEADER, http::HeaderValue::from_static("gpt-x"));
        assert_eq!(read(&headers, &body).map(|u| u.model), Ok("gpt-x".into()));
    }

    #[test]
    fn an_upload_that_is_no_form_or_lacks_a_field_is_refused() {
        let (_, body) = form("batch", "x");
        assert!(read(&HeaderMap::new(), &body).is_err());
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            http::HeaderValue::from_static("multipart/form-data; boundary=b"),
        );
        let only_purpose =
            b"--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--b--\r\n";
        assert!(
            matches!(read(&headers, only_purpose), Err(GatewayError::InvalidRequest(m)) if m.contains("`file`"))
        );
    }
}
