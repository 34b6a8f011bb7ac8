//! The log writer: lines are appended to one in-memory buffer and a background thread writes the
//! buffer to stdout in batches, so a request's log line costs neither a system call nor a wake-up
//! of another thread.
//!
//! - A line is appended whole under a short lock (lines of concurrent callers never interleave).
//! - The writer thread sleeps until the buffer holds something; the first line into an empty
//!   buffer wakes it (one wake-up per batch, not per line), and it then waits [`BATCH_WINDOW`] so
//!   the lines of that window leave in one `write`. A buffer past [`EAGER_BYTES`] is written at
//!   once.
//! - Nothing is dropped: past [`MAX_BYTES`] waiting to be written, a caller waits for the writer
//!   (stdout that does not drain slows the process down rather than losing lines or memory).
//! - [`Guard`] writes what is left when dropped (the process's last lines); lines logged after
//!   that are dropped.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the writer gathers lines after the first one of a batch.
pub const BATCH_WINDOW: Duration = Duration::from_millis(20);
/// A buffer this large is written without waiting for the window to end.
pub const EAGER_BYTES: usize = 256 * 1024;
/// Most bytes waiting to be written; a line past it waits for the writer.
pub const MAX_BYTES: usize = 8 * 1024 * 1024;

#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    closed: bool,
}

#[derive(Default)]
struct Shared {
    pending: Mutex<Pending>,
    /// Signalled to the writer: the buffer became non-empty, grew past [`EAGER_BYTES`], or closed.
    filled: Condvar,
    /// Signalled to callers held at [`MAX_BYTES`]: a batch left.
    drained: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        // A panic while holding the lock leaves a valid buffer: keep using it.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A handle that appends lines (`io::Write`, and `MakeWriter` for the tracing formatter).
#[derive(Clone)]
pub struct BatchWriter {
    shared: Arc<Shared>,
}

/// Stops the writer thread after writing everything still pending, when dropped.
pub struct Guard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Starts the writer thread writing to `out`.
pub fn start<W: Write + Send + 'static>(out: W, thread_name: &str) -> (BatchWriter, Guard) {
    let shared = Arc::new(Shared::default());
    let thread = {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name(thread_name.to_owned())
            .spawn(move || write_batches(&shared, out))
            .ok()
    };
    let writer = BatchWriter {
        shared: Arc::clone(&shared),
    };
    if thread.is_none() {
        // Without a writer nothing would ever drain: refuse lines rather than hold callers.
        shared.lock().closed = true;
        eprintln!("switchyard: cannot start the log writer thread; log lines are dropped");
    }
    (writer, Guard { shared, thread })
}

impl BatchWriter {
    /// Appends `line` (whole) to the pending batch (dropped once the writer has stopped).
    pub fn append(&self, line: &[u8]) {
        let mut pending = self.shared.lock();
        while pending.bytes.len() >= MAX_BYTES && !pending.closed {
            pending = self
                .shared
                .drained
                .wait(pending)
                .unwrap_or_else(|e| e.into_inner());
        }
        if pending.closed {
            return;
        }
        let was_empty = pending.bytes.is_empty();
        pending.bytes.extend_from_slice(line);
        let eager = pending.bytes.len() >= EAGER_BYTES;
        drop(pending);
        if was_empty || eager {
            self.shared.filled.notify_one();
        }
    }
}

impl Write for BatchWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.append(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for BatchWriter {
    type Writer = BatchWriter;

    fn make_writer(&'a self) -> BatchWriter {
        self.clone()
    }
}

/// The writer thread: waits for a first line, gathers for the window (or until the buffer is
/// large), swaps the buffer out and writes it with the lock released.
fn write_batches<W: Write>(shared: &Shared, mut out: W) {
    let mut spare = Vec::new();
    loop {
        let mut pending = shared.lock();
        while pending.bytes.is_empty() && !pending.closed {
            pending = shared
                .filled
                .wait(pending)
                .unwrap_or_else(|e| e.into_inner());
        }
        if !pending.closed && pending.bytes.len() < EAGER_BYTES {
            pending = shared
                .filled
                .wait_timeout_while(pending, BATCH_WINDOW, |p| {
                    !p.closed && p.bytes.len() < EAGER_BYTES
                })
                .map(|(guard, _)| guard)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        let closed = pending.closed;
        std::mem::swap(&mut pending.bytes, &mut spare);
        drop(pending);
        shared.drained.notify_all();
        if !spare.is_empty() {
            let _ = out.write_all(&spare).and_then(|()| out.flush());
            spare.clear();
            // Give a burst's large buffer back rather than holding it forever.
            spare.shrink_to(EAGER_BYTES);
        }
        if closed && shared.lock().bytes.is_empty() {
            return;
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.filled.notify_one();
        self.shared.drained.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Sink {
        bytes: Arc<Mutex<Vec<u8>>>,
        writes: Arc<Mutex<usize>>,
    }

    impl Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.bytes.lock().unwrap().extend_from_slice(bytes);
            *self.writes.lock().unwrap() += 1;
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_leave_in_batches_whole_and_in_order_and_the_guard_writes_the_rest() {
        let sink = Sink::default();
        let (writer, guard) = start(sink.clone(), "test-log");
        for i in 0..1000 {
            writer.append(format!("line {i}\n").as_bytes());
        }
        drop(guard);
        let text = String::from_utf8(sink.bytes.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1000);
        for (i, line) in lines.iter().enumerate() {
            assert_eq!(*line, format!("line {i}"));
        }
        let writes = *sink.writes.lock().unwrap();
        assert!(writes < 100, "{writes} writes for 1000 lines: not batched");
    }

    #[test]
    fn concurrent_lines_never_interleave() {
        let sink = Sink::default();
        let (writer, guard) = start(sink.clone(), "test-log");
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let writer = writer.clone();
                std::thread::spawn(move || {
                    for i in 0..500 {
                        let line = format!("{t}:{i}:{}\n", "x".repeat(100 + i % 50));
                        writer.append(line.as_bytes());
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        drop(guard);
        let text = String::from_utf8(sink.bytes.lock().unwrap().clone()).unwrap();
        let mut next = [0usize; 4];
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let t: usize = parts.next().unwrap().parse().unwrap();
            let i: usize = parts.next().unwrap().parse().unwrap();
            assert_eq!(parts.next().unwrap(), "x".repeat(100 + i % 50));
            assert_eq!(i, next[t], "thread {t}'s lines in order");
            next[t] += 1;
        }
        assert_eq!(next, [500; 4]);
    }

    #[test]
    fn a_line_written_while_idle_leaves_within_the_window() {
        let sink = Sink::default();
        let (writer, _guard) = start(sink.clone(), "test-log");
        writer.append(b"first\n");
        // A condition wait, not a timing assertion: the line must leave without any other line
        // or the guard pushing it.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while sink.bytes.lock().unwrap().is_empty() {
            assert!(std::time::Instant::now() < deadline, "the line never left");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(&*sink.bytes.lock().unwrap(), b"first\n");
    }

    #[test]
    fn a_full_buffer_holds_the_caller_instead_of_dropping_lines() {
        struct Slow(Sink);
        impl Write for Slow {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                std::thread::sleep(Duration::from_millis(2));
                self.0.write(bytes)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let (writer, guard) = start(Slow(sink.clone()), "test-log");
        let line = vec![b'y'; 64 * 1024];
        let mut line = line;
        line.push(b'\n');
        // 32 MiB through an 8 MiB buffer: callers must wait, and nothing is lost.
        for _ in 0..512 {
            writer.append(&line);
        }
        drop(guard);
        assert_eq!(sink.bytes.lock().unwrap().len(), 512 * line.len());
    }
}
