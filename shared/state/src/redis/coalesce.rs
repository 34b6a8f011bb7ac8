//! Coalescing: the writer turns one drained batch of queued writes into script calls, folding
//! each member's successes on one (channel, model) into a single `switchyard_success_v2` call
//! that carries every latency sample in queue order.
//!
//! Under load nearly every write is a success, and most of a batch's successes are the same few
//! members': one script per success made Redis run (and publish, and every other proxy merge) a
//! member and a health record per request. Folding is exact: the script applies the samples one
//! by one (the same EWMA and propensity steps), and a success is only moved ahead of writes it
//! commutes with — a run closes as soon as any other write touches its member, its health record
//! or (for anything but another success, which only zeroes the same streak) its channel.

use switchyard_engine::{ChannelId, MemberId, UnixMillis};

use super::shared::{Op, SuccessOp};
use super::sync::Entity;

/// Successes of one member on one (channel, model), folded into one script call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SuccessRun<'a> {
    pub member: MemberId,
    pub channel: ChannelId,
    pub model: &'a str,
    pub canary: bool,
    pub promote_after: u32,
    /// The latest `now` of the run (what decides whether a failure's streak is cleared).
    pub now: UnixMillis,
    /// One per success, in queue order.
    pub latencies: Vec<f64>,
}

impl<'a> SuccessRun<'a> {
    /// A run of one success.
    pub(crate) fn one(s: &'a SuccessOp) -> SuccessRun<'a> {
        SuccessRun {
            member: s.member,
            channel: s.channel,
            model: &s.model,
            canary: s.canary,
            promote_after: s.promote_after,
            now: s.now,
            latencies: vec![s.latency_ms],
        }
    }

    /// A run of one: `op` if it is a success.
    pub(crate) fn of(op: &'a Op) -> Option<SuccessRun<'a>> {
        match op {
            Op::Success(s) => Some(SuccessRun::one(s)),
            _ => None,
        }
    }

    /// Whether another success of this run's key may join it.
    fn takes(&self, other: &SuccessRun<'_>) -> bool {
        self.member == other.member
            && self.channel == other.channel
            && self.model == other.model
            && self.canary == other.canary
            && self.promote_after == other.promote_after
    }

    /// Whether a success of `other` must stay behind this run (they share a member or a health
    /// record; a shared channel alone commutes: both only zero its streak).
    fn conflicts_with(&self, other: &SuccessRun<'_>) -> bool {
        self.member == other.member || (self.channel == other.channel && self.model == other.model)
    }

    fn touches(&self, e: &Entity) -> bool {
        match e {
            Entity::Member(m) => *m == self.member,
            Entity::Channel(c) => *c == self.channel,
            Entity::Health(c, model) => *c == self.channel && model == self.model,
            Entity::Recovering(_) | Entity::Credential(_) | Entity::Sticky(..) => false,
        }
    }
}

/// What one script call of a batch runs.
#[derive(Debug)]
pub(crate) enum Call<'a> {
    Success(SuccessRun<'a>),
    /// Any other write, as queued.
    Op(&'a Op),
}

/// One script call and the queued writes it stands for.
#[derive(Debug)]
pub(crate) struct Planned<'a> {
    pub call: Call<'a>,
    /// The earliest queue stamp among its writes: its updates' propagation stamp (so the lag
    /// measured is that of the oldest write it carries).
    pub queued_at: u64,
    /// How many queued writes it carries.
    pub writes: usize,
}

/// The script calls for `batch`, in an order with the same result as running every write one
/// by one in queue order.
pub(crate) fn plan(batch: &[(Op, u64)]) -> Vec<Planned<'_>> {
    let mut calls: Vec<Planned<'_>> = Vec::new();
    // Success runs that may still take later successes (indices into `calls`).
    let mut open: Vec<usize> = Vec::new();
    for (op, queued_at) in batch {
        if let Some(run) = SuccessRun::of(op) {
            let joined = open
                .iter()
                .copied()
                .find(|&i| matches!(&calls[i].call, Call::Success(r) if r.takes(&run)));
            if let Some(i) = joined {
                let planned = &mut calls[i];
                if let Call::Success(r) = &mut planned.call {
                    r.latencies.extend_from_slice(&run.latencies);
                    r.now = r.now.max(run.now);
                }
                planned.writes += 1;
                planned.queued_at = planned.queued_at.min(*queued_at);
                continue;
            }
            open.retain(|&i| !matches!(&calls[i].call, Call::Success(r) if r.conflicts_with(&run)));
            open.push(calls.len());
            calls.push(Planned {
                call: Call::Success(run),
                queued_at: *queued_at,
                writes: 1,
            });
        } else {
            let touched = op.entities();
            open.retain(|&i| match &calls[i].call {
                Call::Success(r) => !touched.iter().any(|e| r.touches(e)),
                Call::Op(_) => false,
            });
            calls.push(Planned {
                call: Call::Op(op),
                queued_at: *queued_at,
                writes: 1,
            });
        }
    }
    calls
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::shared::FailureOp;
    use crate::types::FailureKind;

    fn success(member: MemberId, model: &str, latency_ms: f64, now: UnixMillis) -> Op {
        Op::Success(SuccessOp {
            member,
            channel: 1,
            model: model.to_owned(),
            latency_ms,
            canary: false,
            promote_after: 0,
            now,
        })
    }

    fn failure(member: MemberId, model: &str) -> Op {
        Op::Failure(FailureOp {
            member,
            channel: 1,
            model: model.to_owned(),
            kind: FailureKind::Retryable,
            retry_after_ms: 0,
            fault_protection: true,
            cooldown_ms: 1_000,
            now: 50,
        })
    }

    /// (member, latencies, writes, queued_at) of a success call.
    type RunShape = (MemberId, Vec<f64>, usize, u64);

    /// The shape of each success call; `None` for other writes.
    fn shape(calls: &[Planned<'_>]) -> Vec<Option<RunShape>> {
        calls
            .iter()
            .map(|p| match &p.call {
                Call::Success(r) => Some((r.member, r.latencies.clone(), p.writes, p.queued_at)),
                Call::Op(_) => None,
            })
            .collect()
    }

    #[test]
    fn successes_of_one_member_fold_into_one_call_in_queue_order() {
        let batch: Vec<(Op, u64)> = (0..5u32)
            .map(|i| {
                (
                    success(7, "m", f64::from(i) + 0.5, 100 + u64::from(i)),
                    10 + u64::from(i),
                )
            })
            .collect();
        let calls = plan(&batch);
        assert_eq!(
            shape(&calls),
            vec![Some((7, vec![0.5, 1.5, 2.5, 3.5, 4.5], 5, 10))]
        );
        let Call::Success(run) = &calls[0].call else {
            panic!("not a success run");
        };
        assert_eq!(run.now, 104, "the latest now of the run");
    }

    #[test]
    fn members_on_one_channel_fold_separately_and_interleave_freely() {
        let batch = vec![
            (success(1, "a", 1.0, 1), 1),
            (success(2, "b", 2.0, 1), 2),
            (success(1, "a", 3.0, 1), 3),
            (success(2, "b", 4.0, 1), 4),
        ];
        assert_eq!(
            shape(&plan(&batch)),
            vec![
                Some((1, vec![1.0, 3.0], 2, 1)),
                Some((2, vec![2.0, 4.0], 2, 2))
            ]
        );
    }

    #[test]
    fn a_shared_health_record_or_member_keeps_the_order() {
        // Two members on one (channel, model): their samples feed one EWMA, so no reordering.
        let batch = vec![
            (success(1, "a", 1.0, 1), 1),
            (success(2, "a", 2.0, 1), 2),
            (success(1, "a", 3.0, 1), 3),
        ];
        assert_eq!(
            shape(&plan(&batch)),
            vec![
                Some((1, vec![1.0], 1, 1)),
                Some((2, vec![2.0], 1, 2)),
                Some((1, vec![3.0], 1, 3)),
            ]
        );
        // One member on two models: its member record is shared.
        let batch = vec![
            (success(1, "a", 1.0, 1), 1),
            (success(1, "b", 2.0, 1), 2),
            (success(1, "a", 3.0, 1), 3),
        ];
        assert_eq!(plan(&batch).len(), 3);
    }

    #[test]
    fn a_write_touching_the_run_closes_it_and_others_pass() {
        let batch = vec![
            (success(1, "a", 1.0, 1), 1),
            (failure(1, "a"), 2),
            (success(1, "a", 3.0, 1), 3),
            // A cooldown of another member leaves member 1's run open.
            (
                Op::Cooldown {
                    member: 9,
                    until: 5,
                },
                4,
            ),
            (success(1, "a", 4.0, 1), 5),
            // A channel-level write on its channel closes it.
            (
                Op::ChannelFailure {
                    channel: 1,
                    fault_protection: true,
                    threshold: 3,
                    now: 6,
                },
                6,
            ),
            (success(1, "a", 5.0, 1), 7),
        ];
        assert_eq!(
            shape(&plan(&batch)),
            vec![
                Some((1, vec![1.0], 1, 1)),
                None,
                Some((1, vec![3.0, 4.0], 2, 3)),
                None,
                None,
                Some((1, vec![5.0], 1, 7)),
            ]
        );
    }

    #[test]
    fn a_write_to_another_health_record_leaves_the_run_open() {
        // Member 2's failure writes member 2 and the health record (1, "b"): neither is member
        // 1's nor its record (1, "a"), so member 1's successes still fold around it.
        // Nor does member 3's failure on another channel with the same model name, (2, "a").
        let mut elsewhere = failure(3, "a");
        if let Op::Failure(f) = &mut elsewhere {
            f.channel = 2;
        }
        let batch = vec![
            (success(1, "a", 1.0, 1), 1),
            (failure(2, "b"), 2),
            (success(1, "a", 2.0, 3), 3),
            (elsewhere, 4),
            (success(1, "a", 3.0, 5), 5),
        ];
        assert_eq!(
            shape(&plan(&batch)),
            vec![Some((1, vec![1.0, 2.0, 3.0], 3, 1)), None, None]
        );
    }

    #[test]
    fn canary_flags_and_thresholds_are_part_of_the_run() {
        let mut canary = success(1, "a", 2.0, 1);
        if let Op::Success(s) = &mut canary {
            s.canary = true;
            s.promote_after = 3;
        }
        let batch = vec![
            (success(1, "a", 1.0, 1), 1),
            (canary.clone(), 2),
            (canary, 3),
        ];
        assert_eq!(
            shape(&plan(&batch)),
            vec![Some((1, vec![1.0], 1, 1)), Some((1, vec![2.0, 2.0], 2, 2))]
        );
    }
}
