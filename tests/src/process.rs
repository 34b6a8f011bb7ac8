//! A child process of an end-to-end test whose stdout (JSON log lines) is kept, so a test can
//! wait for a line; killed on drop, printing its last lines when the test failed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a process may take to log what a test waits for, or to stop on SIGTERM.
const PATIENCE: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(50);

/// A child process whose stdout (JSON log lines) is kept; SIGKILLed on drop.
pub struct Process {
    pub name: &'static str,
    pub child: Child,
    pub lines: Arc<Mutex<Vec<String>>>,
}

impl Process {
    pub fn spawn(name: &'static str, command: &mut Command) -> Process {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        // Drains stdout for the whole life of the process, so the pipe never fills.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        Process { name, child, lines }
    }

    /// The first log line (as JSON) for which `pick` answers.
    pub fn find_log<T>(&self, pick: impl Fn(&Value) -> Option<T>) -> Option<T> {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find_map(|v| pick(&v))
    }

    /// Waits for a log line; fails at once if the process exits first.
    pub async fn wait_log<T>(&mut self, what: &str, pick: impl Fn(&Value) -> Option<T>) -> T {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(found) = self.find_log(&pick) {
                return found;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                // Let the reader thread take the last lines, then look once more.
                tokio::time::sleep(Duration::from_millis(200)).await;
                if let Some(found) = self.find_log(&pick) {
                    return found;
                }
                panic!("{} exited ({status}) before {what}", self.name);
            }
            assert!(
                Instant::now() < deadline,
                "{}: timed out waiting for {what}",
                self.name
            );
            tokio::time::sleep(POLL).await;
        }
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, then the exit status (fails if it does not exit within `PATIENCE`).
    pub async fn terminate(&mut self) -> ExitStatus {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not stop on SIGTERM",
                self.name
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// SIGKILL: no goodbye to anyone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            // A failed test: show what this process logged last.
            let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
            let tail = lines.len().saturating_sub(40);
            eprintln!("--- last log lines of the {} ---", self.name);
            for line in &lines[tail..] {
                eprintln!("{line}");
            }
        }
    }
}
