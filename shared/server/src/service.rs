//! What a connection serves and with what: the service's shape ([`Routes`]), the settings every
//! connection of a server reads, and the rule every answer leaves with (close, or keep-alive and
//! its timeout). The bottom of the connection's modules: both the plain reader and writer and the
//! hyper path read it.

use axum::body::Body;
use axum::extract::Request as AxumRequest;
use axum::response::Response as AxumResponse;
use http::{header, HeaderName, HeaderValue, Response};

use crate::limits::Limits;
use crate::registry::Activity;

/// What every connection of one server reads: the limits, and values derived from them once.
pub(crate) struct Settings {
    pub(crate) limits: Limits,
    pub(crate) keep_alive: HeaderValue,
}

/// What a server serves: an axum `Router`, or a service of the same shape in front of one.
/// (The blanket impl below repeats the bounds: Rust has no trait aliases.)
pub trait Routes:
    tower::Service<
        AxumRequest,
        Response = AxumResponse,
        Error = std::convert::Infallible,
        Future: Send,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> Routes for S where
    S: tower::Service<
            AxumRequest,
            Response = AxumResponse,
            Error = std::convert::Infallible,
            Future: Send,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// An answer given before its request body was read to the end closes the connection (the rest
/// of the body is still on its way), and says so, so that a pooled client never sends its next
/// request on a connection that is about to close; the socket then lingers (see `socket`). Every
/// other answer tells the client how long an idle connection stays open, so that a client that
/// reads `keep-alive` stops reusing it before the server closes it.
pub(crate) fn announce_close_or_idle_timeout(
    response: &mut Response<Body>,
    activity: &Activity,
    keep_alive: &HeaderValue,
) {
    let headers = response.headers_mut();
    if activity.unread_body() {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    } else if !headers.contains_key(header::CONNECTION) {
        headers.insert(HeaderName::from_static("keep-alive"), keep_alive.clone());
    }
}
