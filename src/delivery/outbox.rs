//! A socket's outbox: the bounded queue between everyone who wants to send to a device and
//! the one task that writes to its socket. Bounded in frames (`server.outbox_capacity`) and
//! in bytes (`server.outbox_bytes`). A client that falls behind (1/16 of the byte bound
//! queued) gets superseded frames coalesced: a task's queued non-final `ai_message_update`
//! is replaced by its next one (only the newest cumulative text matters; final and
//! non-cumulative frames are never dropped). The byte bound applies to everything chatd
//! holds for the client: the queue, and the batch the writer handed to the socket library
//! and has not yet seen written (a cumulative update can be megabytes; it waits there while
//! the client does not read). Held bytes that stay over the byte bound for
//! `server.slow_consumer_grace`, or a queue that reaches twice it or the frame bound, close
//! the connection with 4001; its queued frames are dropped at once. Delta streaming is
//! `stream.rs`.

mod stream;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::extract::ws::Utf8Bytes;
use chatd_protocol::{AiMessageUpdate, CloseCode, ServerMessage, TaskId};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use stream::StreamMode;
use stream::{Given, Positions};

use crate::metrics::{CodeLabel, Metrics, TypeLabel};

/// One encoded frame, cheap to clone for every device of a broadcast.
#[derive(Clone, Debug)]
pub struct EncodedFrame {
    pub kind: &'static str,
    pub text: Utf8Bytes,
}

impl EncodedFrame {
    pub fn new(msg: &ServerMessage) -> Self {
        Self {
            kind: msg.type_name(),
            text: Utf8Bytes::from(msg.to_json()),
        }
    }
}

/// A client counts as behind (its queued updates are coalesced) once this fraction of
/// `max_bytes` is queued; below, every update goes out, as a client that keeps up expects.
const BEHIND_FRACTION: usize = 16;

/// The limits and mode of one socket's outbox.
#[derive(Debug, Clone, Copy)]
pub struct OutboxSettings {
    /// Most frames queued.
    pub capacity: usize,
    /// Most bytes queued for longer than `grace` (twice this closes at once).
    pub max_bytes: usize,
    pub grace: Duration,
    pub mode: StreamMode,
}

struct Queued {
    frame: EncodedFrame,
    /// Set on a task's non-final update: the task's next update replaces it.
    superseded_by_next_of: Option<TaskId>,
    /// Delta mode: what the device had of the task before this frame (a frame replacing
    /// it is computed from there).
    base: Given,
}

#[derive(Default)]
struct Queue {
    frames: VecDeque<Queued>,
    bytes: usize,
    /// Bytes of the batch the writer took and is writing: handed to the socket library,
    /// whose buffer keeps them until the client reads them (zero once the batch is written).
    in_flight: usize,
    /// When the held bytes went over `max_bytes` (cleared once a write brings them under).
    over_since: Option<Instant>,
    peak_bytes: usize,
    /// Delta mode: what the device has been given of its recent tasks.
    positions: Positions,
}

impl Queue {
    fn push(&mut self, entry: Queued) {
        self.bytes += entry.frame.text.len();
        self.frames.push_back(entry);
    }

    fn remove(&mut self, at: usize) -> Option<Queued> {
        let entry = self.frames.remove(at)?;
        self.bytes -= entry.frame.text.len();
        Some(entry)
    }

    /// Everything chatd holds for the client: queued, and handed to the socket library.
    fn held(&self) -> usize {
        self.bytes + self.in_flight
    }
}

struct Shared {
    /// A std Mutex: held to push, replace or pop a few entries, never across an await.
    queue: Mutex<Queue>,
    /// Wakes the writer: a frame was queued (a permit is kept when it is busy writing).
    ready: Notify,
    /// Wakes the writer's slow-consumer watch: the held bytes went over the byte bound.
    over: Notify,
    /// Fired when the writer must close the socket; `close_code` says with what.
    close: CancellationToken,
    /// Set once, by whoever closes first. A std Mutex: held only to read/write the value.
    close_code: Mutex<Option<CloseCode>>,
    settings: OutboxSettings,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The sending side of a socket. Cloning shares the queue.
#[derive(Clone)]
pub struct Outbox {
    shared: Arc<Shared>,
    metrics: Arc<Metrics>,
}

/// The writer task's side.
pub struct OutboxReceiver {
    shared: Arc<Shared>,
    pub close: CancellationToken,
}

pub fn outbox(settings: OutboxSettings, metrics: Arc<Metrics>) -> (Outbox, OutboxReceiver) {
    let close = CancellationToken::new();
    let shared = Arc::new(Shared {
        queue: Mutex::default(),
        ready: Notify::new(),
        over: Notify::new(),
        close: close.clone(),
        close_code: Mutex::new(None),
        settings,
    });
    (
        Outbox {
            shared: shared.clone(),
            metrics,
        },
        OutboxReceiver { shared, close },
    )
}

impl Outbox {
    /// Queues a message; false if the socket is gone or was closed for being too slow.
    pub fn send(&self, msg: &ServerMessage) -> bool {
        self.send_encoded(EncodedFrame::new(msg), msg)
    }

    /// Queues an already encoded frame (broadcasts encode once).
    pub fn send_encoded(&self, frame: EncodedFrame, msg: &ServerMessage) -> bool {
        if self.shared.close.is_cancelled() {
            return false;
        }
        let kind = frame.kind;
        let settings = self.shared.settings;
        let mut q = self.shared.queue();
        match msg {
            ServerMessage::AiMessageUpdate(u) => self.push_update(&mut q, frame, u),
            _ => q.push(Queued {
                frame,
                superseded_by_next_of: None,
                base: Given::default(),
            }),
        }
        if q.frames.len() > settings.capacity || q.bytes > settings.max_bytes.saturating_mul(2) {
            drop(q);
            tracing::warn!("outbox full: closing slow consumer");
            self.close_with(CloseCode::SlowConsumer);
            return false;
        }
        if q.held() > settings.max_bytes && q.over_since.is_none() {
            q.over_since = Some(Instant::now());
            self.shared.over.notify_one();
        }
        q.peak_bytes = q.peak_bytes.max(q.bytes);
        drop(q);
        self.shared.ready.notify_one();
        self.metrics
            .frames_out
            .get_or_create(&TypeLabel { r#type: kind })
            .inc();
        if let ServerMessage::Error(e) = msg {
            self.metrics
                .errors
                .get_or_create(&CodeLabel {
                    code: e.code.as_str(),
                })
                .inc();
        }
        true
    }

    /// Queues a task's update in place of the task's queued non-final one (which it
    /// supersedes: its text is cumulative), as a delta for delta devices.
    fn push_update(&self, q: &mut Queue, frame: EncodedFrame, u: &AiMessageUpdate) {
        let task = &u.task_id;
        let behind = q.bytes >= self.shared.settings.max_bytes / BEHIND_FRACTION;
        let superseded = q
            .frames
            .iter()
            .rposition(|e| behind && e.superseded_by_next_of.as_ref() == Some(task))
            .and_then(|at| q.remove(at));
        if superseded.is_some() {
            self.metrics.frames_coalesced.inc();
        }
        let next_of = (!u.is_final_chunk).then(|| task.clone());
        match self.shared.settings.mode {
            StreamMode::Cumulative => q.push(Queued {
                frame,
                superseded_by_next_of: next_of,
                base: Given::default(),
            }),
            StreamMode::Delta => {
                let base = match superseded {
                    Some(old) => old.base,
                    None => q.positions.given(task),
                };
                let frame = match stream::as_delta(u, base) {
                    Some(delta) => EncodedFrame::new(&ServerMessage::AiMessageUpdate(delta)),
                    None => frame,
                };
                match u.is_final_chunk {
                    true => q.positions.forget(task),
                    false => q.positions.set(task, Given::of(&u.full_content_so_far)),
                }
                q.push(Queued {
                    frame,
                    superseded_by_next_of: next_of,
                    base,
                });
            }
        }
    }

    /// Asks the writer to send a close frame with `code` (the first code asked for wins).
    /// A slow consumer's queued frames are dropped at once.
    pub fn close_with(&self, code: CloseCode) {
        {
            let mut slot = self
                .shared
                .close_code
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if slot.is_none() {
                *slot = Some(code);
            }
        }
        if code == CloseCode::SlowConsumer {
            let mut q = self.shared.queue();
            q.frames = VecDeque::new();
            q.bytes = 0;
        }
        self.shared.close.cancel();
        // The writer waits on `ready` alone (one waiter in every idle connection's task).
        self.shared.ready.notify_one();
    }

    /// Resolves once someone asked for the socket to close.
    pub fn closing(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.shared.close.cancelled()
    }

    pub fn is_closed(&self) -> bool {
        self.shared.close.is_cancelled()
    }

    /// The most bytes that were ever queued at once.
    pub fn peak_bytes(&self) -> usize {
        self.shared.queue().peak_bytes
    }
}

impl OutboxReceiver {
    pub fn close_code(&self) -> Option<CloseCode> {
        *self
            .shared
            .close_code
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The next frames to write, oldest first: at least one, at most `max_frames`, and no
    /// more once `max_bytes` are reached. Waits while the queue is empty; none once the
    /// socket is to be closed (what is queued then is [`Self::drain`]'s).
    pub async fn next_batch(&self, max_frames: usize, max_bytes: usize) -> Vec<EncodedFrame> {
        loop {
            let ready = self.shared.ready.notified();
            if self.close.is_cancelled() {
                return Vec::new();
            }
            let batch = self.take(max_frames, max_bytes);
            if !batch.is_empty() {
                return batch;
            }
            ready.await;
        }
    }

    /// Everything queued (closing: the rest goes out before the close frame).
    pub fn drain(&self) -> Vec<EncodedFrame> {
        self.take(usize::MAX, usize::MAX)
    }

    /// Takes a batch off the queue; its bytes stay held (in flight) until [`Self::written`].
    fn take(&self, max_frames: usize, max_bytes: usize) -> Vec<EncodedFrame> {
        let mut q = self.shared.queue();
        let mut batch = Vec::new();
        let mut bytes = 0;
        while batch.len() < max_frames && bytes < max_bytes {
            let Some(entry) = q.remove(0) else { break };
            bytes += entry.frame.text.len();
            batch.push(entry.frame);
        }
        q.in_flight += bytes;
        batch
    }

    /// The batch taken last was written out (the socket library's flush returned): its bytes
    /// are no longer held, and the held bytes under the bound end the grace.
    pub fn written(&self) {
        let mut q = self.shared.queue();
        q.in_flight = 0;
        if q.held() <= self.shared.settings.max_bytes {
            q.over_since = None;
        }
    }

    /// Bytes held for the client: queued, and handed to the socket library unwritten.
    pub fn held_bytes(&self) -> usize {
        self.shared.queue().held()
    }

    /// Resolves when the held bytes have stayed over the byte bound for the grace period.
    pub async fn stayed_over(&self) {
        let grace = self.shared.settings.grace;
        loop {
            let over = self.shared.over.notified();
            let since = self.shared.queue().over_since;
            match since {
                Some(since) => {
                    tokio::time::sleep_until(since + grace).await;
                    if self.shared.queue().over_since == Some(since) {
                        return;
                    }
                }
                None => over.await,
            }
        }
    }
}

#[cfg(test)]
mod tests;
