//! What a transport failure came down to: the fixed set of causes every layer of the upstream
//! client reports (a bottom module: the HTTP/1.1 and HTTP/2 connections and the pooled client
//! all use it, and it uses none of them).

/// What a transport failure came down to: a fixed set, fit for a log field and a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportCause {
    /// The upstream's host name did not resolve.
    Dns,
    /// The upstream refused the connection (nothing listens there).
    Refused,
    /// The connection was reset, aborted or closed before a whole answer head.
    Reset,
    /// The TLS handshake failed (a certificate not trusted, a port that does not speak TLS).
    Tls,
    /// Connecting, or the answer, took longer than allowed.
    Timeout,
    /// Anything else (an unusable URL, an answer that is not HTTP).
    Other,
}

impl TransportCause {
    /// Every cause, in label order.
    pub const ALL: [TransportCause; 6] = [
        TransportCause::Dns,
        TransportCause::Refused,
        TransportCause::Reset,
        TransportCause::Tls,
        TransportCause::Timeout,
        TransportCause::Other,
    ];

    /// The label in logs, metrics and API answers.
    pub fn as_str(self) -> &'static str {
        match self {
            TransportCause::Dns => "dns",
            TransportCause::Refused => "refused",
            TransportCause::Reset => "reset",
            TransportCause::Tls => "tls",
            TransportCause::Timeout => "timeout",
            TransportCause::Other => "other",
        }
    }

    /// The cause in words, for a client's error message (never a URL or a secret).
    pub fn describe(self) -> &'static str {
        match self {
            TransportCause::Dns => "the upstream's host name did not resolve",
            TransportCause::Refused => "connection refused by the upstream",
            TransportCause::Reset => "the upstream closed or reset the connection before answering",
            TransportCause::Tls => "the TLS handshake with the upstream failed",
            TransportCause::Timeout => "the upstream did not connect or answer in time",
            TransportCause::Other => "the exchange with the upstream failed",
        }
    }

    /// The cause of a socket error, by its kind.
    pub fn of_io(kind: std::io::ErrorKind) -> TransportCause {
        use std::io::ErrorKind::*;
        match kind {
            ConnectionRefused => TransportCause::Refused,
            ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof | NotConnected => {
                TransportCause::Reset
            }
            TimedOut => TransportCause::Timeout,
            _ => TransportCause::Other,
        }
    }

    /// The cause of one of hyper's errors: its socket error's, or a connection that ended early.
    pub(crate) fn of_hyper(e: &hyper::Error) -> TransportCause {
        let mut source = std::error::Error::source(e);
        while let Some(inner) = source {
            if let Some(io) = inner.downcast_ref::<std::io::Error>() {
                return TransportCause::of_io(io.kind());
            }
            source = inner.source();
        }
        if e.is_incomplete_message() || e.is_closed() || e.is_canceled() {
            TransportCause::Reset
        } else if e.is_timeout() {
            TransportCause::Timeout
        } else {
            TransportCause::Other
        }
    }
}
