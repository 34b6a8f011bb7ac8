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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use http_body_util::{BodyExt, Empty, Full};

    #[derive(Debug)]
    struct Wrapped(BodyTimeout);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("reading the body")
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_body_timeout_is_found_in_an_error_chain_and_says_what_happened() {
        assert_eq!(
            BodyTimeout.to_string(),
            "the request body was not received in time"
        );
        assert!(BodyTimeout::is(&BodyTimeout));
        assert!(BodyTimeout::is(&Wrapped(BodyTimeout)));
        let other = std::io::Error::other("connection reset");
        assert!(!BodyTimeout::is(&other));
    }

    #[test]
    fn the_wrappers_report_their_inner_bodys_end_and_size() {
        let registry = Arc::new(Registry::new(4, 0));
        let admission = registry
            .admit(std::net::IpAddr::from([127, 0, 0, 1]))
            .unwrap();
        let activity = admission.activity();
        let full = DeadlineBody::new(Full::new(Bytes::from_static(b"abc")), Duration::ZERO, None);
        assert!(!full.is_end_stream());
        assert_eq!(full.size_hint().exact(), Some(3));
        let empty = DeadlineBody::new(Empty::<Bytes>::new(), Duration::ZERO, None);
        assert!(empty.is_end_stream());
        let tracked = TrackedBody::new(Full::new(Bytes::from_static(b"abcd")), activity.begin());
        assert!(!tracked.is_end_stream());
        assert_eq!(tracked.size_hint().exact(), Some(4));
        drop(tracked);
        let tracked = TrackedBody::new(Empty::<Bytes>::new(), activity.begin());
        assert!(tracked.is_end_stream());
        drop(tracked);
        assert!(!activity.is_busy(), "the guard went with the body");
    }

    #[tokio::test]
    async fn the_last_frame_clears_the_unread_mark_before_the_end_is_polled() {
        let registry = Arc::new(Registry::new(4, 0));
        let admission = registry
            .admit(std::net::IpAddr::from([127, 0, 0, 1]))
            .unwrap();
        let activity = admission.activity();
        activity.set_unread_body(true);
        let mut body = DeadlineBody::new(
            Full::new(Bytes::from_static(b"abc")),
            Duration::from_secs(60),
            Some(Arc::clone(&activity)),
        );
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), Bytes::from_static(b"abc"));
        // The body has nothing left: the connection may be reused, without waiting for the
        // reader to poll the end.
        assert!(!activity.unread_body());
    }

    #[tokio::test]
    async fn a_body_that_does_not_arrive_in_time_fails_with_the_timeout() {
        struct Never;
        impl Body for Never {
            type Data = Bytes;
            type Error = std::convert::Infallible;
            fn poll_frame(
                self: Pin<&mut Self>,
                _: &mut Context<'_>,
            ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
                Poll::Pending
            }
        }
        let mut body = DeadlineBody::new(Never, Duration::from_millis(20), None);
        let error = body.frame().await.unwrap().unwrap_err();
        assert!(BodyTimeout::is(error.as_ref()));
    }
}
