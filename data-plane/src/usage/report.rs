//! Sending the buffer to the control plane (`ReportUsage`): every flush interval (or as soon as
//! a batch's worth of keys is pending) [`report_usage`] takes a batch out of the buffer and sends
//! it. A batch that fails keeps its id and is resent as it is until the control plane
//! acknowledges it, so a retry of a batch that was applied but whose answer was lost is
//! recognised (`duplicate`) and never counted twice. A batch the control plane refuses as invalid
//! is resent in two parts under ids of their own, and so on, so one record it cannot take is
//! dropped alone rather than with its batch. Meanwhile requests keep aggregating in the buffer.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use switchyard_proto::client::{connect_config, with_jitter, INITIAL_BACKOFF};
use switchyard_proto::v1;
use switchyard_proto::v1::snapshot_service_client::SnapshotServiceClient;
use switchyard_proto::{WatchAuth, WatchError};
use tokio_util::sync::CancellationToken;
use tonic::metadata::{Ascii, MetadataValue};

use super::buffer::{UsageBuffer, UsageConfig};

/// Longest delay between retries of a failing batch.
pub const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(5);

/// Time one `ReportUsage` call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to the control plane's `ReportUsage`.
#[derive(Clone)]
pub struct UsageClient {
    client: SnapshotServiceClient<tonic::transport::Channel>,
    authorization: Option<MetadataValue<Ascii>>,
}

impl UsageClient {
    /// A lazily connecting client (reconnects by itself), with the same endpoint, TLS and fleet
    /// token as the snapshot stream.
    pub fn new(endpoint: &str, auth: &WatchAuth) -> Result<UsageClient, WatchError> {
        let (endpoint, authorization) = connect_config(endpoint, auth)?;
        Ok(UsageClient {
            client: SnapshotServiceClient::new(endpoint.connect_lazy()),
            authorization,
        })
    }

    /// Sends one batch (bounded by [`CALL_TIMEOUT`]).
    pub async fn report(&mut self, batch: &v1::UsageBatch) -> Result<v1::UsageAck, tonic::Status> {
        let mut request = tonic::Request::new(batch.clone());
        request.set_timeout(CALL_TIMEOUT);
        if let Some(value) = &self.authorization {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        match tokio::time::timeout(CALL_TIMEOUT, self.client.report_usage(request)).await {
            Ok(answer) => answer.map(tonic::Response::into_inner),
            Err(_) => Err(tonic::Status::deadline_exceeded("ReportUsage timed out")),
        }
    }
}

/// What became of one attempt to send a batch.
enum Sent {
    /// Acknowledged (applied, or already applied before): the batch is done.
    Done,
    /// The control plane refused the batch as invalid and it has nothing left to split:
    /// retrying cannot help, it is dropped.
    Refused,
    /// The control plane refused the batch as invalid: its two parts are sent instead, so what
    /// it can take is not lost with what it cannot.
    Split(Box<[v1::UsageBatch; 2]>),
    /// Not acknowledged: the same batch is to be sent again.
    Retry,
}

async fn send(
    client: &mut UsageClient,
    buffer: &UsageBuffer,
    batch: &v1::UsageBatch,
    last_warning: &mut Option<Instant>,
) -> Sent {
    match client.report(batch).await {
        Ok(ack) => {
            if ack.duplicate {
                buffer.batches_duplicate.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(batch_id = %batch.batch_id, "usage batch was already applied");
            } else {
                buffer.batches_sent.fetch_add(1, Ordering::Relaxed);
            }
            buffer
                .records_sent
                .fetch_add(batch.records.len() as u64, Ordering::Relaxed);
            buffer
                .log_sent
                .fetch_add(batch.requests.len() as u64, Ordering::Relaxed);
            Sent::Done
        }
        Err(status) if status.code() == tonic::Code::InvalidArgument => {
            buffer.batches_rejected.fetch_add(1, Ordering::Relaxed);
            if let Some(parts) = split(batch) {
                tracing::warn!(batch_id = %batch.batch_id, error = %status.message(), "the control plane refused a usage batch; resending it in two parts");
                return Sent::Split(Box::new(parts));
            }
            let requests = batch
                .records
                .iter()
                .fold(0u64, |n, r| n.saturating_add(r.requests));
            buffer.dropped(requests.saturating_add(batch.dropped_requests));
            buffer
                .log_dropped
                .fetch_add(batch.requests.len() as u64, Ordering::Relaxed);
            tracing::error!(batch_id = %batch.batch_id, error = %status.message(), requests, "the control plane refused a usage batch; dropped");
            Sent::Refused
        }
        Err(status) => {
            buffer.batches_failed.fetch_add(1, Ordering::Relaxed);
            // At most one warning per 10 s while the control plane is away.
            if last_warning.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
                *last_warning = Some(Instant::now());
                tracing::warn!(
                    code = ?status.code(),
                    error = %status.message(),
                    pending_keys = buffer.pending_keys(),
                    "usage report failed; keeping the batch and retrying"
                );
            }
            Sent::Retry
        }
    }
}

/// A refused batch in two parts with ids of their own (the refused id was not applied): its
/// guardrail reports apart from the rest, else its records apart from the rest (its shadow
/// comparisons and request-log rows), else its shadow comparisons apart from its request-log
/// rows, else its one list in halves. `None` for a batch of a single record, comparison, report
/// or row: nothing is left to split.
fn split(batch: &v1::UsageBatch) -> Option<[v1::UsageBatch; 2]> {
    let id = |n: u8| format!("{}.{n}", batch.batch_id);
    let guardrails = batch.guardrails.as_slice();
    let rest = !batch.records.is_empty()
        || !batch.shadows.is_empty()
        || !batch.requests.is_empty()
        || !batch.semantic_trials.is_empty();
    if !guardrails.is_empty() && (rest || guardrails.len() > 1) {
        let (a, b) = if rest {
            (&[][..], guardrails)
        } else {
            guardrails.split_at(guardrails.len() / 2)
        };
        let mut first = batch.clone();
        first.batch_id = id(1);
        first.guardrails = a.to_vec();
        let second = v1::UsageBatch {
            batch_id: id(2),
            client_id: batch.client_id.clone(),
            guardrails: b.to_vec(),
            ..v1::UsageBatch::default()
        };
        return Some([first, second]);
    }
    let part = |n: u8| v1::UsageBatch {
        batch_id: id(n),
        client_id: batch.client_id.clone(),
        ..v1::UsageBatch::default()
    };
    let (mut first, mut second) = (part(1), part(2));
    // The drop count and the limit events travel once, with the first part.
    first.dropped_requests = batch.dropped_requests;
    // So do the semantic cache trials.
    first.semantic_trials.clone_from(&batch.semantic_trials);
    first.events.clone_from(&batch.events);
    let (records, shadows, requests) = (&batch.records, &batch.shadows, &batch.requests);
    let kinds = [records.len(), shadows.len(), requests.len()]
        .iter()
        .filter(|n| **n > 0)
        .count();
    if kinds > 1 {
        if records.is_empty() {
            first.shadows.clone_from(shadows);
        } else {
            first.records.clone_from(records);
            second.shadows.clone_from(shadows);
        }
        second.requests.clone_from(requests);
        return Some([first, second]);
    }
    if records.len() > 1 {
        let (a, b) = records.split_at(records.len() / 2);
        (first.records, second.records) = (a.to_vec(), b.to_vec());
    } else if shadows.len() > 1 {
        let (a, b) = shadows.split_at(shadows.len() / 2);
        (first.shadows, second.shadows) = (a.to_vec(), b.to_vec());
    } else if requests.len() > 1 {
        let (a, b) = requests.split_at(requests.len() / 2);
        (first.requests, second.requests) = (a.to_vec(), b.to_vec());
    } else {
        return None;
    }
    Some([first, second])
}

/// The batch sent last (`in_flight`'s last) is done with: taken off, and its parts put in its
/// place if it was split (the first to be sent next).
fn settle(in_flight: &mut Vec<v1::UsageBatch>, sent: Sent) {
    in_flight.pop();
    if let Sent::Split(parts) = sent {
        let [first, second] = *parts;
        in_flight.extend([second, first]);
    }
}

/// Reports `buffer`'s usage to the control plane at `endpoint` until `shutdown`, then flushes
/// what is left (bounded by `config.final_flush`). Returns an error only for an endpoint that
/// cannot be parsed.
pub async fn report_usage(
    buffer: std::sync::Arc<UsageBuffer>,
    endpoint: String,
    auth: WatchAuth,
    config: UsageConfig,
    shutdown: CancellationToken,
) -> Result<(), WatchError> {
    let mut client = UsageClient::new(&endpoint, &auth)?;
    // The batch being sent, last; before it, the other parts of a refused batch split up.
    let mut in_flight: Vec<v1::UsageBatch> = Vec::new();
    let mut backoff = INITIAL_BACKOFF;
    let mut failing = false;
    let mut attempt: u64 = 0;
    let mut last_warning = None;
    loop {
        let wait = if failing {
            attempt = attempt.wrapping_add(1);
            with_jitter(backoff, attempt)
        } else {
            config.flush_interval
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
            _ = buffer.full.notified(), if !failing => {}
        }
        loop {
            if in_flight.is_empty() {
                in_flight.extend(buffer.take_batch());
            }
            let Some(batch) = in_flight.last() else {
                break;
            };
            let sent = tokio::select! {
                // A call cut by shutdown is resent by the final flush under the same id.
                _ = shutdown.cancelled() => break,
                sent = send(&mut client, &buffer, batch, &mut last_warning) => sent,
            };
            match sent {
                Sent::Done | Sent::Refused | Sent::Split(_) => {
                    settle(&mut in_flight, sent);
                    if failing {
                        tracing::info!("usage reports reach the control plane again");
                    }
                    failing = false;
                    backoff = INITIAL_BACKOFF;
                }
                Sent::Retry => {
                    backoff = if failing {
                        (backoff * 2).min(MAX_RETRY_BACKOFF)
                    } else {
                        INITIAL_BACKOFF
                    };
                    failing = true;
                    break;
                }
            }
        }
        if shutdown.is_cancelled() {
            break;
        }
    }
    final_flush(&mut client, &buffer, in_flight, config.final_flush).await;
    Ok(())
}

/// Sends everything still pending once, within `budget`; what cannot be sent is logged.
async fn final_flush(
    client: &mut UsageClient,
    buffer: &UsageBuffer,
    mut in_flight: Vec<v1::UsageBatch>,
    budget: Duration,
) {
    let deadline = tokio::time::Instant::now() + budget;
    let mut last_warning = None;
    loop {
        if in_flight.is_empty() {
            in_flight.extend(buffer.take_batch());
        }
        let Some(batch) = in_flight.last() else {
            return;
        };
        let sent =
            tokio::time::timeout_at(deadline, send(client, buffer, batch, &mut last_warning)).await;
        match sent {
            Ok(Sent::Retry) | Err(_) => break,
            Ok(sent) => settle(&mut in_flight, sent),
        }
    }
    let mut lost_requests: u64 = 0;
    let mut lost_keys: usize = 0;
    let mut lost_log_rows: usize = 0;
    while let Some(batch) = in_flight.pop().or_else(|| buffer.take_batch()) {
        lost_keys += batch.records.len();
        lost_log_rows += batch.requests.len();
        lost_requests = batch
            .records
            .iter()
            .fold(lost_requests, |n, r| n.saturating_add(r.requests));
    }
    if lost_keys > 0 || lost_log_rows > 0 {
        tracing::warn!(
            lost_keys,
            lost_requests,
            lost_log_rows,
            "shutting down with usage the control plane did not acknowledge"
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn a_refused_batch_splits_until_one_record_is_left() {
        let record = |token: &str| v1::UsageRecord {
            token: token.to_owned(),
            requests: 1,
            ..v1::UsageRecord::default()
        };
        let batch = v1::UsageBatch {
            batch_id: "p-7".to_owned(),
            client_id: "c".to_owned(),
            records: vec![record("a"), record("b"), record("c")],
            dropped_requests: 4,
            shadows: vec![v1::ShadowRecord::default(); 2],
            requests: Vec::new(),
            semantic_trials: Vec::new(),
            guardrails: Vec::new(),
            events: Vec::new(),
        };
        let [records, shadows] = split(&batch).unwrap();
        assert_eq!(
            (records.batch_id.as_str(), records.records.len()),
            ("p-7.1", 3)
        );
        assert!(records.shadows.is_empty());
        assert_eq!(records.dropped_requests, 4, "the drop count travels once");
        assert_eq!(
            (shadows.batch_id.as_str(), shadows.shadows.len()),
            ("p-7.2", 2)
        );
        assert!(shadows.records.is_empty());
        assert_eq!(shadows.dropped_requests, 0);
        let [a, b] = split(&records).unwrap();
        assert_eq!((a.records.len(), b.records.len()), (1, 2));
        assert_eq!(
            (a.batch_id.as_str(), b.batch_id.as_str()),
            ("p-7.1.1", "p-7.1.2")
        );
        assert!(split(&a).is_none(), "one record: nothing left to split");
        let [x, y] = split(&shadows).unwrap();
        assert_eq!((x.shadows.len(), y.shadows.len()), (1, 1));
        assert!(split(&x).is_none());
    }

    #[test]
    fn a_refused_batch_with_request_log_rows_splits_them_apart_then_in_halves() {
        let row = |id: &str| v1::RequestLogRecord {
            request_id: id.to_owned(),
            ..v1::RequestLogRecord::default()
        };
        let batch = v1::UsageBatch {
            batch_id: "p-8".to_owned(),
            records: vec![v1::UsageRecord::default()],
            shadows: vec![v1::ShadowRecord::default()],
            requests: vec![row("a"), row("b"), row("c")],
            ..v1::UsageBatch::default()
        };
        let [records, rest] = split(&batch).unwrap();
        assert_eq!(
            (
                records.records.len(),
                records.shadows.len(),
                records.requests.len()
            ),
            (1, 0, 0)
        );
        assert_eq!(
            (rest.records.len(), rest.shadows.len(), rest.requests.len()),
            (0, 1, 3)
        );
        let [shadows, rows] = split(&rest).unwrap();
        assert_eq!((shadows.shadows.len(), shadows.requests.len()), (1, 0));
        assert_eq!((rows.shadows.len(), rows.requests.len()), (0, 3));
        let [a, b] = split(&rows).unwrap();
        assert_eq!((a.requests.len(), b.requests.len()), (1, 2));
        assert_eq!(a.requests[0].request_id, "a");
        assert!(split(&a).is_none(), "one row: nothing left to split");
    }

    #[test]
    fn guardrail_reports_split_apart_from_the_rest_then_in_halves() {
        let batch = v1::UsageBatch {
            batch_id: "p-9".to_owned(),
            client_id: "c".to_owned(),
            records: vec![v1::UsageRecord::default()],
            dropped_requests: 2,
            guardrails: vec![v1::GuardrailRecord::default(); 3],
            ..v1::UsageBatch::default()
        };
        let [rest, guardrails] = split(&batch).unwrap();
        assert_eq!((rest.records.len(), rest.guardrails.len()), (1, 0));
        assert_eq!(rest.dropped_requests, 2);
        assert_eq!(
            (guardrails.records.len(), guardrails.guardrails.len()),
            (0, 3)
        );
        assert_eq!(guardrails.dropped_requests, 0);
        assert_eq!(
            (rest.batch_id.as_str(), guardrails.batch_id.as_str()),
            ("p-9.1", "p-9.2")
        );
        let [a, b] = split(&guardrails).unwrap();
        assert_eq!((a.guardrails.len(), b.guardrails.len()), (1, 2));
        assert!(split(&a).is_none(), "one report: nothing left to split");
    }
}
