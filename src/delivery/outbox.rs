//! A socket's outbox: the bounded queue between everyone who wants to send to a device and
//! the one task that writes to its socket. A full queue means the client reads too slowly:
//! the connection is closed with 4001 instead of buffering without limit.

use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::ws::Utf8Bytes;
use chatd_protocol::{CloseCode, ServerMessage};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

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

/// The sending side of a socket. Cloning shares the queue.
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::Sender<EncodedFrame>,
    /// Fired when the writer must close the socket; `close_code` says with what.
    close: CancellationToken,
    /// Set once, by whoever closes first. A std Mutex: held only to read/write the value.
    close_code: Arc<Mutex<Option<CloseCode>>>,
    metrics: Arc<Metrics>,
}

/// The writer task's side.
pub struct OutboxReceiver {
    pub rx: mpsc::Receiver<EncodedFrame>,
    pub close: CancellationToken,
    close_code: Arc<Mutex<Option<CloseCode>>>,
}

impl OutboxReceiver {
    pub fn close_code(&self) -> Option<CloseCode> {
        *self
            .close_code
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

pub fn outbox(capacity: usize, metrics: Arc<Metrics>) -> (Outbox, OutboxReceiver) {
    let (tx, rx) = mpsc::channel(capacity);
    let close = CancellationToken::new();
    let close_code = Arc::new(Mutex::new(None));
    (
        Outbox {
            tx,
            close: close.clone(),
            close_code: close_code.clone(),
            metrics,
        },
        OutboxReceiver {
            rx,
            close,
            close_code,
        },
    )
}

impl Outbox {
    /// Queues a message; false if the socket is gone or was closed for being too slow.
    pub fn send(&self, msg: &ServerMessage) -> bool {
        self.send_encoded(EncodedFrame::new(msg), msg)
    }

    /// Queues an already encoded frame (broadcasts encode once).
    pub fn send_encoded(&self, frame: EncodedFrame, msg: &ServerMessage) -> bool {
        if self.close.is_cancelled() {
            return false;
        }
        let kind = frame.kind;
        match self.tx.try_send(frame) {
            Ok(()) => {
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
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!("outbox full: closing slow consumer");
                self.close_with(CloseCode::SlowConsumer);
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    /// Asks the writer to send a close frame with `code` (the first code asked for wins).
    pub fn close_with(&self, code: CloseCode) {
        {
            let mut slot = self
                .close_code
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if slot.is_none() {
                *slot = Some(code);
            }
        }
        self.close.cancel();
    }

    /// Resolves once someone asked for the socket to close.
    pub fn closing(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.close.cancelled()
    }

    pub fn is_closed(&self) -> bool {
        self.close.is_cancelled() || self.tx.is_closed()
    }
}
