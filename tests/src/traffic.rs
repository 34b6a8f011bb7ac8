//! Traffic flowing through every proxy of a fleet while a test changes things through the
//! control plane's admin API ([`crate::control`]).
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::control::{chat_saying, Proxy, Upstream, MODEL, PATIENCE};

/// One answer the background traffic got.
#[derive(Debug, Clone)]
pub struct Sent {
    pub phase: usize,
    pub status: u16,
    pub channel: String,
    /// `x-switchyard-cache` (`hit`, `miss`, `bypass`), empty when no cache rule applied.
    pub cache: String,
    /// A hit's `Age`, in seconds.
    pub age: Option<u64>,
    /// The error's `code`, empty for a success.
    pub code: String,
    pub body: String,
}

/// Chats for route `MODEL` flowing through every proxy from background tasks (one sequential
/// client per proxy) while a test changes things through the admin API. In phase `p` the client
/// of proxy `i` sends with `tokens[p][i]`, so usage can be told apart per phase and proxy.
pub struct Traffic {
    phase: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    answers: Vec<Arc<Mutex<Vec<Sent>>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Traffic {
    /// Every chat says "hello".
    pub fn start(proxies: &[Proxy], tokens: Vec<Vec<String>>) -> Traffic {
        Traffic::saying(proxies, tokens, "hello")
    }

    /// Every chat's one user message is `content`.
    pub fn saying(proxies: &[Proxy], tokens: Vec<Vec<String>>, content: &str) -> Traffic {
        let tokens = Arc::new(tokens);
        let phase = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut answers = Vec::new();
        let mut tasks = Vec::new();
        for (i, proxy) in proxies.iter().enumerate() {
            let sink = Arc::new(Mutex::new(Vec::new()));
            answers.push(Arc::clone(&sink));
            let (addr, tokens, phase, stop, content) = (
                proxy.addr,
                Arc::clone(&tokens),
                Arc::clone(&phase),
                Arc::clone(&stop),
                content.to_owned(),
            );
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let phase = phase.load(Ordering::SeqCst);
                    let reply = chat_saying(addr, &tokens[phase][i], MODEL, &content).await;
                    sink.lock().unwrap().push(Sent {
                        phase,
                        status: reply.status,
                        channel: reply.channel(),
                        cache: reply.header("x-switchyard-cache").unwrap_or_default(),
                        age: reply.header("age").and_then(|a| a.parse().ok()),
                        code: reply.error_code(),
                        body: reply.body,
                    });
                    // Room for the test's own calls on a small machine.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }));
        }
        Traffic {
            phase,
            stop,
            answers,
            tasks,
        }
    }

    /// How many answers each proxy's client has had so far.
    pub fn counts(&self) -> Vec<usize> {
        self.answers
            .iter()
            .map(|a| a.lock().unwrap().len())
            .collect()
    }

    /// Each proxy's answers from the `since` counts (from [`Traffic::counts`]) on.
    pub fn since(&self, since: &[usize]) -> Vec<Vec<Sent>> {
        self.answers
            .iter()
            .zip(since)
            .map(|(answers, since)| answers.lock().unwrap()[*since..].to_vec())
            .collect()
    }

    /// Waits until each proxy's client has had `n` more answers.
    pub async fn more(&self, n: usize) {
        let from = self.counts();
        let deadline = Instant::now() + PATIENCE;
        while self
            .counts()
            .iter()
            .zip(&from)
            .any(|(now, from)| *now < from + n)
        {
            assert!(
                Instant::now() < deadline,
                "the traffic stalled: {:?} answers, {from:?} before",
                self.counts()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until each proxy's client has had the answer to a request it sent after this call:
    /// no request still in flight was sent before it.
    pub async fn fence(&self) {
        self.more(2).await;
    }

    /// Moves the clients to `phase`; returns once every request in flight is of that phase.
    pub async fn enter(&self, phase: usize) {
        self.phase.store(phase, Ordering::SeqCst);
        self.fence().await;
    }

    /// Each proxy's answers from the `since` counts (from [`Traffic::counts`]) on, each
    /// asserted a 200 from `upstream`'s channel.
    pub fn assert_served_since(&self, since: &[usize], upstream: &Upstream) {
        for sent in self.since(since).iter().flatten() {
            assert_eq!(sent.status, 200, "{}", sent.body);
            assert_eq!(sent.channel, upstream.name, "{}", sent.body);
        }
    }

    /// Stops the clients; every answer, per proxy.
    pub async fn finish(self) -> Vec<Vec<Sent>> {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            task.await.unwrap();
        }
        self.answers
            .iter()
            .map(|a| std::mem::take(&mut *a.lock().unwrap()))
            .collect()
    }

    /// Stops the clients; every answer, per proxy, each asserted a 200 (no client request
    /// failed while things changed).
    pub async fn stop(self) -> Vec<Vec<Sent>> {
        let answers = self.finish().await;
        for sent in answers.iter().flatten() {
            assert_eq!(sent.status, 200, "phase {}: {}", sent.phase, sent.body);
        }
        answers
    }
}

/// Waits until every proxy serves from snapshot `revision` or a later one, then until no
/// request sent before is still in flight.
pub async fn settle(proxies: &[Proxy], traffic: &Traffic, revision: u64) {
    for proxy in proxies {
        proxy.wait_revision(revision).await;
    }
    traffic.fence().await;
}
