//! A request body that fails when its client pauses too long.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use hyper::body::{Body, Bytes, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// The error of a body whose client sent nothing for the read timeout.
#[derive(Debug, thiserror::Error)]
#[error("the client sent nothing of its request body for {0:?} (--read-timeout)")]
pub struct BodyReadTimeout(pub Duration);

/// `inner`, failing with [`BodyReadTimeout`] when no frame comes for `limit`.
pub(crate) struct Timed<B> {
    inner: B,
    limit: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl<B> Timed<B> {
    pub(crate) fn new(inner: B, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            deadline: Box::pin(tokio::time::sleep(limit)),
        }
    }
}

impl<B> Body for Timed<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                let next = Instant::now() + this.limit;
                this.deadline.as_mut().reset(next);
                Poll::Ready(frame.map(|frame| frame.map_err(Into::into)))
            }
            Poll::Pending => {
                ready!(this.deadline.as_mut().poll(cx));
                Poll::Ready(Some(Err(BodyReadTimeout(this.limit).into())))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
