//! The key calling a Files or Batch endpoint, and the ids it may open and make.

use std::sync::Arc;

use http::HeaderMap;
use serde_json::Value;
use switchyard_engine::{ChannelId, Token};

use crate::errors::GatewayError;
use crate::object_id::{decode, encode, IdKey, Kind, ObjectId};
use crate::phases::receive::authenticated;
use crate::snapshot::View;
use crate::state::AppState;

/// The calling key (admitted: enabled, unexpired) and the view it was admitted under.
pub struct Caller {
    pub view: Arc<View>,
    pub token: Token,
    pub key: IdKey,
}

impl Caller {
    pub fn of(state: &AppState, headers: &HeaderMap) -> Result<Caller, GatewayError> {
        let view = state
            .views
            .load_full()
            .ok_or_else(GatewayError::not_ready)?;
        let token = authenticated(&view, headers, None)?.clone();
        Ok(Caller {
            view,
            token,
            key: state.id_key().clone(),
        })
    }

    /// What the gateway's id `text` of a `kind` names, when it is this key's: anything else is
    /// [`GatewayError::NoSuchObject`], whatever made it so.
    pub fn open(&self, kind: Kind, text: &str) -> Result<ObjectId, GatewayError> {
        decode(&self.key, kind, text)
            .filter(|id| id.token == self.token.id)
            .ok_or(GatewayError::NoSuchObject(kind.noun()))
    }

    /// This key's gateway id of the object `upstream` of `kind` on `channel`.
    pub fn wrap(&self, kind: Kind, channel: ChannelId, upstream: &str) -> Option<String> {
        let id = ObjectId {
            channel,
            token: self.token.id,
            upstream: upstream.to_owned(),
        };
        encode(&self.key, kind, &id)
    }

    /// Rewrites an upstream object's ids into this key's gateway ids: a file's `id`; a batch's
    /// `id` and its files' (`input_file_id`, `output_file_id`, `error_file_id`). `Err` names an
    /// id the gateway cannot carry.
    pub fn rewrite(
        &self,
        kind: Kind,
        channel: ChannelId,
        object: &mut Value,
    ) -> Result<(), String> {
        let fields: &[(&str, Kind)] = match kind {
            Kind::File => &[("id", Kind::File)],
            Kind::Batch => &[
                ("id", Kind::Batch),
                ("input_file_id", Kind::File),
                ("output_file_id", Kind::File),
                ("error_file_id", Kind::File),
            ],
            Kind::MessageBatch => &[("id", Kind::MessageBatch)],
        };
        for (field, kind) in fields {
            if let Some(Value::String(id)) = object.get_mut(*field) {
                *id = self
                    .wrap(*kind, channel, id)
                    .ok_or_else(|| format!("its `{field}` is not an id the gateway can carry"))?;
            }
        }
        // A message batch's results are fetched from its `results_url`: the gateway's path,
        // relative, so the SDK asks the gateway at the base URL it was given.
        if kind == Kind::MessageBatch {
            let id = object.get("id").and_then(Value::as_str).map(str::to_owned);
            if let (Some(url), Some(id)) = (object.get_mut("results_url"), id) {
                if url.is_string() {
                    *url = Value::String(format!("/v1/messages/batches/{id}/results"));
                }
            }
        }
        Ok(())
    }
}
