//! One socket's life: register the device, run the reader (which dispatches to the
//! session) and the single writer (`writer.rs`), close with the right code, and finish the
//! closing handshake by reading until the stream ends.

mod writer;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket};
use chatd_protocol::CloseCode;
use futures_util::StreamExt;
use futures_util::stream::SplitStream;
use tokio_util::sync::CancellationToken;

use crate::auth::UserId;
use crate::delivery::Device;
use crate::delivery::outbox::{Outbox, OutboxSettings, StreamMode, outbox};
use crate::session::Session;
use crate::state::AppState;

/// How long a closing socket may take to finish the handshake once the close frame is
/// written, before it is dropped.
const CLOSE_HANDSHAKE: Duration = Duration::from_secs(3);

/// The caller gives the span (`ws::upgrade`): `#[tracing::instrument]` on this function
/// would store its body's future twice in every connection's task.
pub async fn run(
    app: Arc<AppState>,
    socket: WebSocket,
    user: UserId,
    session_id: String,
    expires_at: u64,
    mode: StreamMode,
) {
    let server = &app.config.server;
    let settings = OutboxSettings {
        capacity: server.outbox_capacity,
        max_bytes: server.outbox_bytes,
        grace: server.slow_consumer_grace,
        mode,
    };
    // Split first: the socket itself (large) is then never held across an await.
    let (sink, stream) = socket.split();
    let (out, out_rx) = outbox(settings, app.metrics.clone());
    let device = Arc::new(Device::new(session_id, user, out.clone()));
    let delivery = &app.delivery;
    // The one-off steps are boxed: held inline, the largest of them would set the size of
    // every connection's task for its whole life (see load-tests `idle`, run N).
    Box::pin(delivery.register(device.clone())).await;
    app.metrics.connections_open.inc();
    let session = Session::new(app.clone(), device.clone(), expires_at);
    Box::pin(session.send_pending()).await;
    // The drain closes every registered socket with 1012 once this token is cancelled; one
    // registered after that sees the token (the read loop need not wait on it).
    let shutdown = app.tasks.connections_shutdown.clone();
    if shutdown.is_cancelled() {
        out.close_with(CloseCode::ServiceRestart);
    }
    // Fired once the writer is done: its close frame written, or given up on.
    let writer_done = CancellationToken::new();
    let time_left = || session.token_time_left();
    let ends = writer::Ends {
        shutdown: &shutdown,
        time_left: &time_left,
    };
    // Everything here lives in every idle connection's task: the writer ends `writer_done`
    // itself (no future around it), and each loop waits on as few things as it can.
    tokio::join!(
        read_loop(stream, &session, &out, &writer_done),
        writer::write_loop(sink, out_rx, &out, ends, writer_done.clone()),
    );
    Box::pin(delivery.unregister(&device.user_hash, device.conn_id)).await;
    app.metrics.connections_open.dec();
}

async fn read_loop(
    mut stream: SplitStream<WebSocket>,
    session: &Session,
    out: &Outbox,
    writer_done: &CancellationToken,
) {
    // One timer for the socket's life: at the token's `exp` (reset when `refresh_token`
    // moved it meanwhile), not one per inbound frame.
    let expiry = tokio::time::sleep(session.token_time_left());
    tokio::pin!(expiry);
    loop {
        if out.is_closed() {
            // Closing: keep reading (and ignoring) until the peer's close ends the stream,
            // for at most `CLOSE_HANDSHAKE` once the writer is done (a slow consumer's close
            // frame may wait long for the client to read again).
            // Boxed: held inline, the closing steps would be part of every connection's task.
            Box::pin(async {
                let handshake = async {
                    writer_done.cancelled().await;
                    tokio::time::sleep(CLOSE_HANDSHAKE).await;
                };
                tokio::select! {
                    () = drain(&mut stream) => {}
                    () = handshake => tracing::debug!("close handshake timed out"),
                }
            })
            .await;
            return;
        }
        let next = tokio::select! {
            next = stream.next() => next,
            () = &mut expiry => {
                let left = session.token_time_left();
                if left.is_zero() {
                    tracing::debug!("session token expired; closing");
                    out.close_with(CloseCode::TokenExpired);
                } else {
                    expiry.as_mut().reset(tokio::time::Instant::now() + left);
                }
                continue;
            }
            _ = out.closing() => continue,
        };
        match next {
            None => break,
            // Boxed: the handlers' futures (store, sync, cache) are large, and held inline they
            // would make every idle connection's task that large too.
            Some(Ok(Message::Text(text))) => Box::pin(session.handle_text(text.as_str())).await,
            Some(Ok(Message::Binary(_))) => session.handle_binary(),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
            // The library queues the close reply; reading on until the stream ends flushes
            // it and completes the handshake.
            Some(Ok(Message::Close(_))) => {}
            Some(Err(e)) => {
                let code = close_code_for(&e);
                tracing::debug!(error = %e, "socket read error");
                match code {
                    Some(code) => out.close_with(code),
                    None => break,
                }
            }
        }
    }
    // The stream ended (peer closed or the socket broke): stop the writer.
    out.close_with(CloseCode::Normal);
}

async fn drain(stream: &mut SplitStream<WebSocket>) {
    while let Some(msg) = stream.next().await {
        if msg.is_err() {
            break;
        }
    }
}

/// Read errors chatd answers with a close frame rather than a dropped socket.
fn close_code_for(e: &axum::Error) -> Option<CloseCode> {
    use std::error::Error;
    let mut source: Option<&(dyn Error + 'static)> = e.source();
    while let Some(s) = source {
        if let Some(t) = s.downcast_ref::<tokio_tungstenite::tungstenite::Error>() {
            return match t {
                tokio_tungstenite::tungstenite::Error::Utf8(_) => Some(CloseCode::InvalidUtf8),
                tokio_tungstenite::tungstenite::Error::Capacity(_) => {
                    Some(CloseCode::MessageTooBig)
                }
                tokio_tungstenite::tungstenite::Error::Protocol(_) => {
                    Some(CloseCode::ProtocolError)
                }
                _ => None,
            };
        }
        source = s.source();
    }
    None
}
