//! One socket's single writer: drains the outbox in batches (the frames queued at once go
//! out with one flush), tells the outbox when a batch is written (until then its bytes are
//! held for the client, in the socket library's buffer), closes a slow consumer with 4001,
//! and writes the close frame. Written over any `Sink` of messages, so tests drive it with a
//! socket that stops reading.
//!
//! A slow consumer's close frame follows what the socket library already holds (at most one
//! batch: the frame being written and up to `WRITE_BATCH_BYTES` before it) and waits there
//! for the client to read again, for as long as the connection could have lived (its token's
//! `exp`) unless the server shuts down: a client that reads again late still gets its 4001,
//! never a dropped socket.

use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message};
use chatd_protocol::CloseCode;
use futures_util::{Sink, SinkExt};
use tokio_util::sync::CancellationToken;

use crate::delivery::outbox::{Outbox, OutboxReceiver};

/// How long one write may block (a client that stops reading entirely).
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most frames written before one flush...
const WRITE_BATCH: usize = 32;
/// ...and bytes: the socket library's buffer holds at most about this much besides the
/// last frame of a batch (counted against the outbox's bound until written).
const WRITE_BATCH_BYTES: usize = 16 * 1024;

/// What ends the wait of a slow consumer's close frame for the client to read again.
pub(super) struct Ends<'a> {
    /// The server is shutting down.
    pub shutdown: &'a CancellationToken,
    /// How long the connection may still live (its token's time left).
    pub time_left: &'a (dyn Fn() -> Duration + Sync),
}

/// Writes until the socket closes; `done` is cancelled when the writer ends (its close frame
/// written, or given up on).
pub(super) async fn write_loop<S>(
    mut sink: S,
    rx: OutboxReceiver,
    out: &Outbox,
    ends: Ends<'_>,
    done: CancellationToken,
) where
    S: Sink<Message> + Unpin,
    S::Error: std::fmt::Display,
{
    let _done = done.drop_guard();
    let stayed_over = rx.stayed_over();
    tokio::pin!(stayed_over);
    loop {
        if rx.close.is_cancelled() {
            break;
        }
        let batch = tokio::select! {
            biased;
            () = &mut stayed_over => break slow_consumer(out, &rx, "held over server.outbox_bytes"),
            batch = rx.next_batch(WRITE_BATCH, WRITE_BATCH_BYTES) => batch,
        };
        // None: the socket is to be closed.
        if batch.is_empty() {
            break;
        }
        // Frames queued meanwhile go out in the same socket write (one flush).
        let write = async {
            for frame in batch {
                sink.feed(Message::Text(frame.text)).await?;
            }
            sink.flush().await
        };
        // A write the client does not read blocks, its frames held in the socket library's
        // buffer (and counted by the outbox until written); what is held may then stay over
        // the bound. Either way the socket is closed with 4001 (the frames already handed to
        // the socket library stay in its buffer, ahead of the close frame).
        // Boxed: a write is short-lived, and held inline it (with its timer) would be part of
        // every idle connection's task.
        tokio::select! {
            biased;
            written = Box::pin(tokio::time::timeout(WRITE_TIMEOUT, write)) => match written {
                Ok(Ok(())) => rx.written(),
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "socket write failed");
                    rx.close.cancel();
                    return;
                }
                Err(_) => break slow_consumer(out, &rx, "write blocked"),
            },
            () = &mut stayed_over => break slow_consumer(out, &rx, "held over server.outbox_bytes"),
        }
    }
    Box::pin(close(sink, &rx, ends)).await;
}

/// Flushes what is queued unless the client is too slow, then sends the close frame.
async fn close<S>(mut sink: S, rx: &OutboxReceiver, ends: Ends<'_>)
where
    S: Sink<Message> + Unpin,
    S::Error: std::fmt::Display,
{
    let code = rx.close_code().unwrap_or(CloseCode::Normal);
    if code != CloseCode::SlowConsumer {
        for frame in rx.drain() {
            if tokio::time::timeout(WRITE_TIMEOUT, sink.send(Message::Text(frame.text)))
                .await
                .map_or(true, |r| r.is_err())
            {
                return;
            }
        }
    }
    let close = Message::Close(Some(CloseFrame {
        code: code.code(),
        reason: code.reason().into(),
    }));
    // A slow consumer's close frame waits behind what the socket library holds until the
    // client reads again (or the connection's time is up); any other close gets the usual
    // write deadline.
    let limit = match code {
        CloseCode::SlowConsumer => (ends.time_left)(),
        _ => WRITE_TIMEOUT,
    };
    tokio::select! {
        sent = tokio::time::timeout(limit, sink.send(close)) => match sent {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "close frame not written"),
            Err(_) => tracing::debug!(?code, "close frame not read in time; dropping the socket"),
        },
        _ = ends.shutdown.cancelled(), if code == CloseCode::SlowConsumer => {
            tracing::debug!("shutting down: a slow consumer's close frame is dropped");
        }
    }
}

fn slow_consumer(out: &Outbox, rx: &OutboxReceiver, why: &'static str) {
    tracing::warn!(why, held_bytes = rx.held_bytes(), "closing slow consumer");
    out.close_with(CloseCode::SlowConsumer);
}

#[cfg(test)]
mod tests;
