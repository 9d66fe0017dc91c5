//! The bound on open connections, HTTP and gRPC together
//! ([`Limits::max_connections`](crate::Limits::max_connections)): a
//! connection is served only with a place, held until it closes. Past the
//! bound each listener holds the one connection it accepted until a place
//! frees, and accepts no other: new connections wait in the kernel's
//! backlog (then are refused by it). The request bounds cannot help
//! against connections that send nothing; this one does, with the idle
//! timeout that frees their places (HTTP's in http/serve.rs; gRPC's here:
//! a connection that reads nothing for that long ends).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// A connection holding its place.
#[derive(Debug)]
pub(crate) struct Counted {
    stream: TcpStream,
    _place: OwnedSemaphorePermit,
    idle: Option<Idle>,
}

/// The longest a connection may read nothing, and when that runs out.
#[derive(Debug)]
struct Idle {
    after: Duration,
    deadline: Pin<Box<Sleep>>,
}

/// A listener that accepts a connection only with a place.
#[derive(Debug)]
pub(crate) struct CountedListener {
    listener: TcpListener,
    room: Arc<Semaphore>,
    idle: Duration,
    read_idle: bool,
}

impl CountedListener {
    /// Accepts from `listener` with places from `room`. Every connection
    /// has TCP keepalive probes after `idle` (every third of it, three
    /// unanswered end it) and a user timeout of twice `idle`, so a caller
    /// whose host vanished is found even while nothing is sent (a quiet
    /// stream). With `read_idle`, a connection that reads nothing for
    /// `idle` ends too (gRPC's; HTTP has hyper's header-read timeout).
    pub(crate) fn new(
        listener: TcpListener,
        room: Arc<Semaphore>,
        idle: Duration,
        read_idle: bool,
    ) -> Self {
        CountedListener {
            listener,
            room,
            idle,
            read_idle,
        }
    }

    /// The next connection, once there is a place for it. Accepted first,
    /// then given a place: a listener waiting for a connection holds none
    /// (the HTTP and gRPC listeners share the bound). Past the bound, the
    /// one connection accepted waits for a place, and the listener accepts
    /// no other meanwhile. An accept error (out of descriptors or the
    /// like) is waited out, 50 ms at a time, as axum's listener does.
    pub(crate) async fn next(&self) -> Counted {
        loop {
            match self.try_next().await {
                Ok(counted) => return counted,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    async fn try_next(&self) -> io::Result<Counted> {
        let (stream, _) = self.listener.accept().await?;
        let place = Arc::clone(&self.room)
            .acquire_owned()
            .await
            .map_err(|_| io::Error::other("closed"))?;
        let _ = stream.set_nodelay(true); // each answer is one write: sent at once
        let socket = socket2::SockRef::from(&stream);
        let probes = socket2::TcpKeepalive::new()
            .with_time(self.idle)
            .with_interval(self.idle / 3)
            .with_retries(3);
        let _ = socket.set_tcp_keepalive(&probes);
        let _ = socket.set_tcp_user_timeout(Some(self.idle * 2));
        Ok(Counted {
            stream,
            _place: place,
            idle: self.read_idle.then(|| Idle {
                after: self.idle,
                deadline: Box::pin(tokio::time::sleep(self.idle)),
            }),
        })
    }
}

impl tonic::transport::server::Connected for Counted {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        let Some(idle) = &mut this.idle else {
            return read;
        };
        match read {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                idle.deadline.as_mut().reset(Instant::now() + idle.after);
                Poll::Ready(Ok(()))
            }
            Poll::Pending if idle.deadline.as_mut().poll(cx).is_ready() => {
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the caller sent nothing within the idle timeout",
                )))
            }
            other => other,
        }
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
