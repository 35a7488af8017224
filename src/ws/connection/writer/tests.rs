//! The writer over a socket whose client stops reading (issue 35, defect 7), in paused
//! time: what the socket library holds counts against the bound, and a slow consumer's close
//! frame waits for the client to read again.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use chatd_protocol::{AiMessageUpdate, ChatId, Empty, MessageId, ServerMessage, TaskId};

use super::*;
use crate::delivery::outbox::{OutboxSettings, StreamMode, outbox};
use crate::metrics::Metrics;

const BOUND: usize = 16 * 1024;
const GRACE: Duration = Duration::from_millis(500);

/// A socket as the socket library shows it: it takes a batch of frames into its buffer;
/// while the client does not read, the buffer stays full and the next frame or flush waits.
#[derive(Clone, Default)]
struct Socket(Arc<Mutex<Client>>);

#[derive(Default)]
struct Client {
    reading: bool,
    /// Handed to the socket library, not yet read by the client.
    buffered: Vec<Message>,
    /// What the client read.
    read: Vec<Message>,
    waker: Option<Waker>,
}

impl Socket {
    fn read_again(&self) {
        let mut c = self.0.lock().unwrap();
        c.reading = true;
        let buffered = std::mem::take(&mut c.buffered);
        c.read.extend(buffered);
        if let Some(w) = c.waker.take() {
            w.wake();
        }
    }

    fn read(&self) -> Vec<Message> {
        self.0.lock().unwrap().read.clone()
    }
}

impl Sink<Message> for Socket {
    type Error = std::io::Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.poll_flush(cx)
    }

    fn start_send(self: Pin<&mut Self>, item: Message) -> Result<(), Self::Error> {
        let mut c = self.0.lock().unwrap();
        match c.reading {
            true => c.read.push(item),
            false => c.buffered.push(item),
        }
        Ok(())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        let mut c = self.0.lock().unwrap();
        if c.reading || c.buffered.is_empty() {
            return Poll::Ready(Ok(()));
        }
        c.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.poll_flush(cx)
    }
}

fn update(text: &str) -> ServerMessage {
    ServerMessage::AiMessageUpdate(AiMessageUpdate::new(
        TaskId::parse("t1").unwrap(),
        ChatId::parse("c1").unwrap(),
        MessageId::parse("m1").unwrap(),
        text.into(),
        1,
        false,
    ))
}

/// An outbox whose writer took one 24 KiB update (over the bound, under twice it) that the client does not
/// read, with a small frame queued behind it.
fn stalled() -> (Outbox, OutboxReceiver, Socket) {
    let settings = OutboxSettings {
        capacity: 64,
        max_bytes: BOUND,
        grace: GRACE,
        mode: StreamMode::Cumulative,
    };
    let (out, rx) = outbox(settings, Arc::new(Metrics::new()));
    assert!(out.send(&update(&"x".repeat(24 * 1024))));
    (out, rx, Socket::default())
}

fn close_code(msg: &Message) -> Option<u16> {
    match msg {
        Message::Close(Some(frame)) => Some(frame.code),
        _ => None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_frame_waiting_in_the_socket_library_counts_against_the_bound() {
    let (out, rx, socket) = stalled();
    let shutdown = CancellationToken::new();
    let time_left = || Duration::from_secs(3600);
    let ends = Ends {
        shutdown: &shutdown,
        time_left: &time_left,
    };
    let writer = write_loop(socket.clone(), rx, &out, ends, CancellationToken::new());
    tokio::pin!(writer);
    // The writer hands the update to the socket library, which cannot write it; only a
    // small frame is queued behind it.
    tokio::select! {
        () = &mut writer => panic!("the writer ended"),
        () = tokio::task::yield_now() => {}
    }
    assert!(out.send(&ServerMessage::Pong(Empty {})));
    // Held over the bound for the grace: closed then, not only when the write has been
    // blocked for WRITE_TIMEOUT.
    tokio::select! {
        () = &mut writer => panic!("the writer ended"),
        closed = tokio::time::timeout(WRITE_TIMEOUT / 2, out.closing()) => {
            assert!(closed.is_ok(), "not closed within the grace");
        }
    }
    // Reading again, the client gets what the socket library held, then the close frame;
    // the queued frame was dropped.
    socket.read_again();
    writer.await;
    let read = socket.read();
    assert_eq!(read.len(), 2, "{read:?}");
    assert!(matches!(&read[0], Message::Text(t) if t.len() > 24 * 1024));
    assert_eq!(close_code(&read[1]), Some(4001));
}

#[tokio::test(start_paused = true)]
async fn a_slow_consumers_close_frame_waits_for_the_client_to_read_again() {
    let (out, rx, socket) = stalled();
    let shutdown = CancellationToken::new();
    let time_left = || Duration::from_secs(3600);
    let ends = Ends {
        shutdown: &shutdown,
        time_left: &time_left,
    };
    let writer = write_loop(socket.clone(), rx, &out, ends, CancellationToken::new());
    tokio::pin!(writer);
    // A minute without reading: closed after the grace (or the blocked write), and the
    // socket is kept for the close frame (dropping it would end the stream without one).
    tokio::select! {
        () = &mut writer => panic!("the writer gave up on the client"),
        () = tokio::time::sleep(Duration::from_secs(60)) => {}
    }
    assert!(out.is_closed());
    socket.read_again();
    writer.await;
    let read = socket.read();
    assert_eq!(read.last().and_then(close_code), Some(4001), "{read:?}");
}

#[tokio::test(start_paused = true)]
async fn the_wait_for_a_client_that_never_reads_ends_with_its_token_or_the_server() {
    // The token's time runs out: the writer gives up.
    let (out, rx, socket) = stalled();
    let shutdown = CancellationToken::new();
    let time_left = || Duration::from_secs(120);
    let ends = Ends {
        shutdown: &shutdown,
        time_left: &time_left,
    };
    write_loop(socket.clone(), rx, &out, ends, CancellationToken::new()).await;
    assert!(socket.read().is_empty());

    // The server shuts down: the writer gives up at once.
    let (out, rx, socket) = stalled();
    let time_left = || Duration::from_secs(3600);
    let ends = Ends {
        shutdown: &shutdown,
        time_left: &time_left,
    };
    let writer = write_loop(socket.clone(), rx, &out, ends, CancellationToken::new());
    tokio::pin!(writer);
    tokio::select! {
        () = &mut writer => panic!("the writer gave up before the shutdown"),
        () = out.closing() => {}
    }
    shutdown.cancel();
    writer.await;
    assert!(socket.read().is_empty());
}
