//! The shadow copies waiting to be sent, one queue per rule, so that a rule whose target is slow
//! or hangs holds only its own room: at most [`RULE_QUEUE_CAPACITY`] copies waiting and
//! [`RULE_MAX_IN_FLIGHT`] calls in flight, whatever the other rules do. The proxy as a whole holds
//! at most [`QUEUE_CAPACITY`] copies and [`MAX_IN_FLIGHT`] calls; the rules with a copy waiting
//! and room to send it take turns (round robin), so a busy rule never stalls a quiet one.
//!
//! A copy is checked again when its turn comes (by the sender): one whose rule is no longer in
//! the proxy's current configuration as it was, or is disabled, expired or stopped by then, is
//! dropped, never sent. The queue knows a copy only by its rule's id (a bottom module: it needs
//! nothing of the proxy).

use std::collections::VecDeque;
use std::sync::Mutex;

use switchyard_engine::fxhash::FxHashMap as HashMap;
use tokio::sync::Notify;

/// Copies waiting for the background task, at most, all rules together.
pub const QUEUE_CAPACITY: usize = 256;
/// Shadow calls in flight at once, at most, all rules together.
pub const MAX_IN_FLIGHT: usize = 32;
/// Copies of one rule waiting, at most; beyond this its copies are dropped and counted.
pub const RULE_QUEUE_CAPACITY: usize = 64;
/// Shadow calls of one rule in flight at once, at most.
pub const RULE_MAX_IN_FLIGHT: usize = 8;

/// One rule's copies.
struct RuleQueue<T> {
    waiting: VecDeque<T>,
    in_flight: usize,
}

impl<T> Default for RuleQueue<T> {
    fn default() -> Self {
        RuleQueue {
            waiting: VecDeque::new(),
            in_flight: 0,
        }
    }
}

struct Queues<T> {
    rules: HashMap<i64, RuleQueue<T>>,
    /// The rules with copies waiting, in turn order (each id once).
    turns: VecDeque<i64>,
    waiting: usize,
    in_flight: usize,
    closed: bool,
}

/// The per-rule queues of copies `T`, shared by the offering side and the sender.
pub struct Queue<T> {
    queues: Mutex<Queues<T>>,
    wake: Notify,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Queue {
            queues: Mutex::new(Queues {
                rules: HashMap::default(),
                turns: VecDeque::new(),
                waiting: 0,
                in_flight: 0,
                closed: false,
            }),
            wake: Notify::new(),
        }
    }
}

impl<T> Queue<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queues<T>> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a copy of rule `id`; gives it back when the rule's queue, or the proxy's, is full.
    /// Never waits.
    pub fn push(&self, id: i64, job: T) -> Result<(), T> {
        let mut q = self.lock();
        if q.closed || q.waiting >= QUEUE_CAPACITY {
            return Err(job);
        }
        let rule = q.rules.entry(id).or_default();
        if rule.waiting.len() >= RULE_QUEUE_CAPACITY {
            return Err(job);
        }
        rule.waiting.push_back(job);
        if rule.waiting.len() == 1 {
            q.turns.push_back(id);
        }
        q.waiting += 1;
        drop(q);
        self.wake.notify_one();
        Ok(())
    }

    /// The next copy to send, taking a call slot of its rule and of the proxy (given back with
    /// [`Queue::done`]): the first rule in turn with a copy waiting and a slot free. `None` when
    /// no copy can go now.
    pub fn next(&self) -> Option<(i64, T)> {
        let mut q = self.lock();
        if q.in_flight >= MAX_IN_FLIGHT {
            return None;
        }
        let Queues { rules, turns, .. } = &mut *q;
        let at = turns.iter().position(|id| {
            rules
                .get(id)
                .is_some_and(|r| r.in_flight < RULE_MAX_IN_FLIGHT)
        })?;
        let id = turns.remove(at)?;
        let rule = rules.get_mut(&id)?;
        let job = rule.waiting.pop_front()?;
        rule.in_flight += 1;
        if !rule.waiting.is_empty() {
            // Its next copy waits for the other rules' turns.
            turns.push_back(id);
        }
        q.waiting -= 1;
        q.in_flight += 1;
        Some((id, job))
    }

    /// A copy taken with [`Queue::next`] was sent or dropped: its slots are free again.
    pub fn done(&self, rule: i64) {
        let mut q = self.lock();
        q.in_flight = q.in_flight.saturating_sub(1);
        if let Some(r) = q.rules.get_mut(&rule) {
            r.in_flight = r.in_flight.saturating_sub(1);
            if r.in_flight == 0 && r.waiting.is_empty() {
                q.rules.remove(&rule);
            }
        }
        drop(q);
        self.wake.notify_one();
    }

    /// Waits until a copy was queued or a slot freed since the last call (or the queue closed).
    pub async fn changed(&self) {
        self.wake.notified().await;
    }

    /// No more copies are taken; the sender stops.
    pub fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_one();
    }

    pub fn closed(&self) -> bool {
        self.lock().closed
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn a_rule_holds_only_its_own_room_and_the_rules_take_turns() {
        let q = Queue::default();
        // Rule 1's target hangs: its calls never end, its copies fill only its own queue.
        let mut refused = 0;
        for n in 0..200 {
            refused += usize::from(q.push(1, n).is_err());
        }
        assert_eq!(refused, 200 - RULE_QUEUE_CAPACITY);
        let taken: Vec<_> = std::iter::from_fn(|| q.next()).collect();
        assert_eq!(
            taken.len(),
            RULE_MAX_IN_FLIGHT,
            "its calls in flight, at most"
        );
        // What went out made room for as many more copies of it, no more.
        assert!((0..RULE_MAX_IN_FLIGHT).all(|n| q.push(1, n).is_ok()));
        assert_eq!(q.push(1, 0), Err(0));
        assert_eq!(q.next(), None, "its calls in flight never end");
        // Rule 2 still has all of its room, and goes as soon as it queues.
        for n in 0..RULE_QUEUE_CAPACITY {
            assert!(q.push(2, n).is_ok(), "rule 2's copy {n}");
        }
        assert_eq!(q.push(2, 0), Err(0));
        let next: Vec<_> = std::iter::from_fn(|| q.next()).collect();
        assert_eq!(next.len(), RULE_MAX_IN_FLIGHT);
        assert!(next.iter().all(|(rule, _)| *rule == 2), "{next:?}");
        // A call of rule 2 ends: its next copy goes, not one of rule 1's.
        q.done(2);
        assert_eq!(q.next(), Some((2, RULE_MAX_IN_FLIGHT)));
    }

    #[test]
    fn rules_with_room_alternate_and_the_proxys_bounds_hold() {
        let q = Queue::default();
        for n in 0..3 {
            for rule in [1, 2, 3] {
                q.push(rule, n).unwrap();
            }
        }
        let order: Vec<i64> = (0..6).map(|_| q.next().unwrap().0).collect();
        assert_eq!(order, [1, 2, 3, 1, 2, 3]);
        // The proxy's bound on calls in flight holds over every rule.
        let q = Queue::default();
        for rule in 0..8 {
            for n in 0..RULE_MAX_IN_FLIGHT {
                q.push(rule, n).unwrap();
            }
        }
        let taken = std::iter::from_fn(|| q.next()).count();
        assert_eq!(taken, MAX_IN_FLIGHT);
        // And on copies waiting: 8 rules of 32 fill it.
        let q = Queue::default();
        let queued = (0..10)
            .flat_map(|rule| (0..32).map(move |n| (rule, n)))
            .filter(|(rule, n)| q.push(*rule, *n).is_ok())
            .count();
        assert_eq!(queued, QUEUE_CAPACITY);
        q.close();
        assert!(q.closed());
        assert_eq!(q.push(1, 0), Err(0));
    }
}
