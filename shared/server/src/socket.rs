//! A client connection's socket, with two jobs beyond passing bytes through.
//!
//! **A lingering close for connections answered before their request body was read.**
//! When the server answers without reading the whole request body (a 401 before the body, a 404,
//! a 413), the connection cannot be reused: the rest of the body is still on its way. The answer
//! says `connection: close`, so a pooled client knows not to send another request on it. But a
//! socket closed while the client's body bytes still arrive makes the kernel answer them with a
//! reset, and a reset can destroy the answer before the client has read it. So such a connection
//! closes the way nginx's lingering close does: send our FIN, then read and discard what the client
//! still sends, until it closes its side, [`LINGER_BYTES`] have been discarded or [`LINGER_TIME`]
//! has passed — whichever comes first — and only then close the socket.
//!
//! Every other connection shuts down as before.
//!
//! **A body for hyper's own error answers.** A request that cannot be parsed as HTTP never
//! reaches a service: hyper answers it itself (400, 414 or 431) with an empty body. When such an
//! answer is written while no request is in progress on the connection (so it cannot be one of
//! ours), its empty body is replaced with the JSON error every other answer of the gateway uses.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

use crate::registry::{Activity, Admission};

/// The longest a closing connection keeps reading what the client still sends.
pub const LINGER_TIME: Duration = Duration::from_secs(2);
/// The most bytes a closing connection reads and discards.
pub const LINGER_BYTES: usize = 1024 * 1024;

enum State {
    /// Not shutting down yet (or shutting down plainly).
    Open,
    /// Our FIN is sent; discarding the client's remaining bytes.
    Draining {
        until: Pin<Box<Sleep>>,
        left: usize,
    },
    Closed,
}

/// A client connection's socket: lingers on close when its connection's [`Activity`] says a
/// request body was left unread, and completes hyper's own error answers with a JSON body.
pub struct ClientSocket {
    stream: TcpStream,
    activity: Arc<Activity>,
    state: State,
    /// A rewritten answer still to be written, and how much of it is written.
    pending: Option<(Vec<u8>, usize)>,
    /// The connection's place in the registry, left when the socket is dropped: after an
    /// upgrade (a WebSocket) that is when the upgraded connection ends, not when hyper lets go.
    _admission: Option<Admission>,
}

impl ClientSocket {
    pub fn new(stream: TcpStream, activity: Arc<Activity>) -> ClientSocket {
        ClientSocket {
            stream,
            activity,
            state: State::Open,
            pending: None,
            _admission: None,
        }
    }

    /// The socket holds the connection's admission from now on (see `_admission`).
    pub fn holding(mut self, admission: Admission) -> ClientSocket {
        self._admission = Some(admission);
        self
    }

    /// Writes what is left of a rewritten answer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.pending {
            if *written == bytes.len() {
                self.pending = None;
                break;
            }
            let n =
                std::task::ready!(Pin::new(&mut self.stream).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }

    /// Takes `buf` as a rewritten answer when it is hyper's own bodiless error answer.
    fn rewrite(&mut self, buf: &[u8]) -> bool {
        if self.activity.is_busy() {
            return false;
        }
        match complete_error_answer(buf) {
            Some(answer) => {
                self.pending = Some((answer, 0));
                true
            }
            None => false,
        }
    }

    /// Reads and discards until the client's FIN, the byte budget or the deadline.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let State::Draining { until, left } = &mut self.state else {
            return Poll::Ready(());
        };
        let mut scratch = [0u8; 4096];
        loop {
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut self.stream).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                    *left = left.saturating_sub(buf.filled().len());
                    if *left == 0 {
                        return Poll::Ready(());
                    }
                }
                // The client's FIN, or an error: nothing more will come.
                Poll::Ready(_) => return Poll::Ready(()),
                Poll::Pending => {
                    return match until.as_mut().poll(cx) {
                        Poll::Ready(()) => Poll::Ready(()),
                        Poll::Pending => Poll::Pending,
                    };
                }
            }
        }
    }
}

/// The answers hyper writes itself for requests it cannot parse, and the JSON error each gets.
const AUTOMATIC_ANSWERS: &[(&str, &str, &str)] = &[
    (
        "HTTP/1.1 400 ",
        "bad_request",
        "The request could not be parsed as HTTP/1.1.",
    ),
    (
        "HTTP/1.1 414 ",
        "uri_too_long",
        "The request line is too long.",
    ),
    (
        "HTTP/1.1 431 ",
        "request_header_too_large",
        "The request head is too large.",
    ),
];

/// `head` with its empty body replaced by the JSON error, when `head` is one of hyper's
/// automatic answers (a complete head declaring `content-length: 0`).
fn complete_error_answer(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let (_, code, message) = AUTOMATIC_ANSWERS
        .iter()
        .find(|(status, _, _)| text.starts_with(status))?;
    let head = text.strip_suffix("\r\n\r\n")?;
    let lines = head.split("\r\n");
    let mut declared_empty = false;
    let mut out = String::with_capacity(head.len() + 200);
    for line in lines {
        if line.eq_ignore_ascii_case("content-length: 0") {
            declared_empty = true;
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    if !declared_empty {
        return None;
    }
    let body = format!(
        "{{\"error\":{{\"message\":\"{message}\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"{code}\"}}}}"
    );
    out.push_str("content-type: application/json\r\n");
    out.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    out.push_str(&body);
    Some(out.into_bytes())
}

impl AsyncRead for ClientSocket {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for ClientSocket {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.poll_pending(cx))?;
        if this.rewrite(buf) {
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.poll_pending(cx))?;
        if let [only] = bufs {
            if this.rewrite(only) {
                return Poll::Ready(Ok(only.len()));
            }
        }
        Pin::new(&mut this.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        std::task::ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        std::task::ready!(this.poll_pending(cx))?;
        loop {
            match this.state {
                State::Open => {
                    let result = std::task::ready!(Pin::new(&mut this.stream).poll_shutdown(cx));
                    if result.is_err() || !this.activity.unread_body() {
                        this.state = State::Closed;
                        return Poll::Ready(result);
                    }
                    this.state = State::Draining {
                        until: Box::pin(tokio::time::sleep(LINGER_TIME)),
                        left: LINGER_BYTES,
                    };
                }
                State::Draining { .. } => {
                    std::task::ready!(this.poll_drain(cx));
                    this.state = State::Closed;
                }
                State::Closed => return Poll::Ready(Ok(())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bodiless_automatic_answer_gets_the_json_error() {
        let head = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\ndate: Wed, 02 Dec 2026 12:00:00 GMT\r\n\r\n";
        let out = String::from_utf8(complete_error_answer(head).unwrap()).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\nconnection: close\r\n"));
        assert!(head.contains("date: Wed"));
        assert!(!head.contains("content-length: 0"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"]["code"], "bad_request");
        let big = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        let out = String::from_utf8(complete_error_answer(big).unwrap()).unwrap();
        assert!(out.contains("request_header_too_large"));
    }

    use crate::registry::{Admission, Registry};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server-side socket and its client, the connection's body marked unread or not.
    async fn pair(unread: bool) -> (ClientSocket, TcpStream, Admission) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, peer) = listener.accept().await.unwrap();
        let admission = Arc::new(Registry::new(4, 0)).admit(peer.ip()).unwrap();
        let activity = admission.activity();
        activity.set_unread_body(unread);
        (ClientSocket::new(server, activity), client, admission)
    }

    fn poll_shutdown_once(socket: &mut ClientSocket) -> Poll<io::Result<()>> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        Pin::new(socket).poll_shutdown(&mut cx)
    }

    async fn read_until_closed(client: &mut TcpStream) -> Vec<u8> {
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut out))
            .await
            .expect("the server never closed its side")
            .unwrap();
        out
    }

    const AUTOMATIC_400: &[u8] =
        b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

    #[tokio::test]
    async fn bytes_pass_through_and_a_plain_close_sends_the_fin_at_once() {
        let (mut socket, mut client, _admission) = pair(false).await;
        assert!(
            socket.is_write_vectored(),
            "vectored writes as the socket has them"
        );
        socket.write_all(b"hello").await.unwrap();
        socket.flush().await.unwrap();
        let mut got = [0u8; 5];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello");
        client.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        socket.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        // Nothing unread: the shutdown completes in one step, without waiting for the client.
        assert!(matches!(
            poll_shutdown_once(&mut socket),
            Poll::Ready(Ok(()))
        ));
        assert!(read_until_closed(&mut client).await.is_empty());
    }

    #[tokio::test]
    async fn hypers_own_error_answer_leaves_with_its_json_body_on_flush() {
        let (mut socket, mut client, _admission) = pair(false).await;
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let written = Pin::new(&mut socket).poll_write(&mut cx, AUTOMATIC_400);
        assert!(matches!(written, Poll::Ready(Ok(n)) if n == AUTOMATIC_400.len()));
        socket.flush().await.unwrap();
        let expected = complete_error_answer(AUTOMATIC_400).unwrap();
        let mut got = vec![0u8; expected.len()];
        tokio::time::timeout(Duration::from_secs(10), client.read_exact(&mut got))
            .await
            .expect("the flush did not write the rewritten answer")
            .unwrap();
        assert_eq!(got, expected);
    }

    #[tokio::test]
    async fn an_error_head_written_while_a_request_is_in_progress_is_left_alone() {
        let (mut socket, mut client, admission) = pair(false).await;
        let _busy = admission.activity().begin();
        socket.write_all(AUTOMATIC_400).await.unwrap();
        socket.flush().await.unwrap();
        let mut got = vec![0u8; AUTOMATIC_400.len()];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(got, AUTOMATIC_400);
    }

    #[tokio::test]
    async fn an_unread_body_keeps_the_socket_reading_until_the_client_closes() {
        let (mut socket, mut client, _admission) = pair(true).await;
        assert!(
            poll_shutdown_once(&mut socket).is_pending(),
            "an unread body lingers"
        );
        // The rest of a large body arrives: it is read and discarded, and the socket stays
        // open for more (64 KiB is far below the discard budget and the deadline is seconds).
        client.write_all(&vec![b'x'; 64 * 1024]).await.unwrap();
        let lingering = tokio::time::timeout(
            Duration::from_millis(300),
            std::future::poll_fn(|cx| Pin::new(&mut socket).poll_shutdown(cx)),
        )
        .await;
        assert!(
            lingering.is_err(),
            "closed while the client was still sending"
        );
        // The client closes its side: the close completes.
        client.shutdown().await.unwrap();
        tokio::time::timeout(
            Duration::from_secs(10),
            std::future::poll_fn(|cx| Pin::new(&mut socket).poll_shutdown(cx)),
        )
        .await
        .expect("the linger did not end at the client's close")
        .unwrap();
        assert!(read_until_closed(&mut client).await.is_empty());
    }

    #[test]
    fn other_writes_pass_untouched() {
        // An answer with a body, a success, a partial head, a body chunk.
        for bytes in [
            &b"HTTP/1.1 400 Bad Request\r\ncontent-length: 12\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n",
            b"{\"error\":1}",
        ] {
            assert!(complete_error_answer(bytes).is_none(), "{bytes:?}");
        }
    }
}
