//! Body wrappers: a request body with a read deadline, and a response body that keeps its
//! connection marked busy until it is finished.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use std::sync::Arc;

use crate::registry::{Activity, Busy};

/// The request body was not received within the body deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyTimeout;

impl fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the request body was not received in time")
    }
}

impl std::error::Error for BodyTimeout {}

impl BodyTimeout {
    /// Whether `error` (or anything in its source chain) is a body timeout.
    pub fn is(error: &(dyn std::error::Error + 'static)) -> bool {
        let mut current = Some(error);
        while let Some(e) = current {
            if e.is::<BodyTimeout>() {
                return true;
            }
            current = e.source();
        }
        false
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request body that fails with [`BodyTimeout`] once `timeout` has passed since the request
/// head, unless it has ended. The timer is only armed when the body is first polled, so a
/// request whose body is never read costs nothing. When it carries its connection's
/// [`Activity`], reaching the end of the body clears the connection's unread-body mark.
pub struct DeadlineBody<B> {
    inner: B,
    deadline: Instant,
    sleep: Option<Pin<Box<Sleep>>>,
    activity: Option<Arc<Activity>>,
}

impl<B> DeadlineBody<B> {
    pub fn new(inner: B, timeout: Duration, activity: Option<Arc<Activity>>) -> DeadlineBody<B> {
        DeadlineBody {
            inner,
            deadline: Instant::now() + timeout,
            sleep: None,
            activity,
        }
    }
}

impl<B: Body> DeadlineBody<B> {
    fn note_read(&mut self, ended: bool) {
        if ended || self.inner.is_end_stream() {
            if let Some(activity) = self.activity.take() {
                activity.set_unread_body(false);
            }
        }
    }
}

impl<B> Body for DeadlineBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            match &frame {
                None => this.note_read(true),
                Some(Ok(_)) => this.note_read(false),
                Some(Err(_)) => {}
            }
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body carrying its connection's [`Busy`] guard: the connection counts as busy (not
/// evictable) until the body has been sent or dropped.
pub struct TrackedBody<B> {
    inner: B,
    _busy: Busy,
}

impl<B> TrackedBody<B> {
    pub fn new(inner: B, busy: Busy) -> TrackedBody<B> {
        TrackedBody { inner, _busy: busy }
    }
}

impl<B: Body + Unpin> Body for TrackedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
