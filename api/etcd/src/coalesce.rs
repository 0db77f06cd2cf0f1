//! A connection adapter that gathers the server's small HTTP/2 writes into one socket write.
//!
//! hyper serves every HTTP/2 stream from its own task, and each task that queues a frame wakes
//! the connection task. tokio runs a task woken that way right after the waker (its "LIFO
//! slot"), so when one revision is published to a thousand watch streams the connection task
//! ran after every stream and wrote one small frame per `writev`: measured, one syscall and one
//! loopback TCP segment per two events, half of keel's CPU on that path. [`Coalesce`] buffers
//! the writes and, at the first flush, wakes its own task and returns `Pending`: tokio puts a
//! task that woke itself at the back of the run queue, behind the stream tasks that are still
//! queueing frames, and the flush that follows writes all of them at once.
//!
//! tokio's `yield_now` was tried first and rejected: it parks the waker on the current worker
//! until that worker runs out of work or reaches its periodic maintenance, where no other
//! worker can take it, and under load a worker busy applying a batch held whole connections'
//! responses back (watch p99 3× worse). A self-wake is an ordinary queued task.
//!
//! Nothing is acknowledged early: `poll_flush` is `Ready` only once the bytes are in the
//! socket, exactly as without the adapter. A lone response costs one extra trip through the
//! scheduler, a microsecond or two.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

/// Above this many buffered bytes a write goes to the socket without waiting for a flush.
const HIGH_WATER: usize = 64 * 1024;
/// A single write at least this large skips the buffer (after what is already buffered).
const DIRECT: usize = 16 * 1024;

/// Where a buffered flush stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FlushState {
    /// No deferral in flight.
    Idle,
    /// The task woke itself and waits for its turn at the back of the run queue.
    Deferred,
}

/// A socket whose writes are buffered and sent together at the next flush, once the tasks that
/// were queued when the flush began have had their turn. Reads pass straight through.
pub struct Coalesce<S> {
    inner: S,
    buf: BytesMut,
    state: FlushState,
}

impl<S> Coalesce<S> {
    /// Wraps a connection.
    pub fn new(inner: S) -> Self {
        Coalesce {
            inner,
            buf: BytesMut::new(),
            state: FlushState::Idle,
        }
    }
}

impl<S: AsyncWrite + Unpin> Coalesce<S> {
    /// Writes the whole buffer to the socket.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.buf.is_empty() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buf))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.buf.advance(n);
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Coalesce<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(data)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if this.buf.len() + total > HIGH_WATER || total >= DIRECT {
            ready!(this.poll_drain(cx))?;
            if total >= DIRECT {
                return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
            }
        }
        this.buf.reserve(total);
        for b in bufs {
            this.buf.extend_from_slice(b);
        }
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.buf.is_empty() {
            if this.state == FlushState::Idle {
                // A task that wakes itself while it runs is requeued at the back of its
                // worker's run queue (where another worker may steal it), behind the tasks that
                // were ready already: the streams still queueing frames on this connection.
                this.state = FlushState::Deferred;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            ready!(this.poll_drain(cx))?;
        }
        this.state = FlushState::Idle;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        this.state = FlushState::Idle;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Coalesce<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

/// Connection info is the socket's, as without the adapter.
impl<S: Connected> Connected for Coalesce<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Keeps the runtime's workers busy with tasks that are always ready, so a deferred flush
    /// only completes if the scheduler really requeues it.
    fn busy(stop: &Arc<AtomicBool>) {
        for _ in 0..4 {
            let stop = stop.clone();
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    tokio::task::yield_now().await;
                }
            });
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_flush_completes_and_delivers_in_order_on_a_busy_runtime() {
        let stop = Arc::new(AtomicBool::new(false));
        busy(&stop);
        // On a worker (not in block_on), where the self-wake really goes through the run queue.
        let run = tokio::spawn(async move {
            let (a, mut b) = tokio::io::duplex(1 << 20);
            let mut w = Coalesce::new(a);
            for i in 0..1000u32 {
                w.write_all(&i.to_le_bytes()).await.unwrap();
                w.flush().await.unwrap();
                let mut got = [0u8; 4];
                b.read_exact(&mut got).await.unwrap();
                assert_eq!(u32::from_le_bytes(got), i);
            }
        });
        // A flush that never completes would hang here; fail instead.
        tokio::time::timeout(std::time::Duration::from_secs(30), run)
            .await
            .expect("a deferred flush never completed")
            .unwrap();
        stop.store(true, Ordering::Relaxed);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn small_large_and_vectored_writes_keep_their_order() {
        tokio::spawn(async move {
            let (a, mut b) = tokio::io::duplex(64 * 1024);
            let mut expect = Vec::new();
            let reader = tokio::spawn(async move {
                let mut got = Vec::new();
                b.read_to_end(&mut got).await.unwrap();
                got
            });
            let mut w = Coalesce::new(a);
            for i in 0..300usize {
                // Small ones stay buffered; every 7th is larger than DIRECT; the sum passes
                // HIGH_WATER many times over, so all three paths run.
                let len = if i % 7 == 0 { DIRECT + i } else { 1 + i % 200 };
                let chunk: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8).collect();
                if i % 3 == 0 {
                    let (x, y) = chunk.split_at(len / 2);
                    let mut slices = [io::IoSlice::new(x), io::IoSlice::new(y)];
                    let mut slices = &mut slices[..];
                    let mut left = len;
                    while left > 0 {
                        let n = w.write_vectored(slices).await.unwrap();
                        left -= n;
                        io::IoSlice::advance_slices(&mut slices, n);
                    }
                } else {
                    w.write_all(&chunk).await.unwrap();
                }
                expect.extend_from_slice(&chunk);
                if i % 10 == 0 {
                    w.flush().await.unwrap();
                }
            }
            // Shutdown must send what is still buffered.
            w.shutdown().await.unwrap();
            drop(w);
            assert_eq!(reader.await.unwrap(), expect);
        })
        .await
        .unwrap();
    }
}
