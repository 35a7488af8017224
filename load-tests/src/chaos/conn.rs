//! One device's WebSocket connection to a node: frames are read by a task of the user's
//! (recorded, then handed to the user's loop through its inbox); sends and the connect
//! have deadlines, since a paused node answers nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinSet;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use super::history::{Frame, Recorder, What};
use super::services::Node;

const CONNECT_DEADLINE: Duration = Duration::from_secs(3);
const SEND_DEADLINE: Duration = Duration::from_secs(2);

/// What a connection's reader hands to its user's loop.
pub enum Inbox {
    Frame {
        device: u32,
        conn: u64,
        frame: Box<Frame>,
        raw: Value,
    },
    Closed {
        device: u32,
        conn: u64,
    },
}

/// What every user shares: the recorder, the nodes, the connection counter.
#[derive(Clone)]
pub struct Ctx {
    pub rec: Recorder,
    pub nodes: Arc<Vec<Node>>,
    pub next_conn: Arc<AtomicU64>,
}

type Sink = SplitSink<WebSocketStream<TcpStream>, Message>;

pub struct Conn {
    pub id: u64,
    pub node: usize,
    pub user: u32,
    pub device: u32,
    sink: Sink,
    stop: CancellationToken,
}

/// Who opens a connection and where its frames go.
pub struct Owner<'a> {
    pub ctx: &'a Ctx,
    pub user: u32,
    pub device: u32,
    pub token: &'a str,
    pub inbox: &'a UnboundedSender<Inbox>,
    pub readers: &'a mut JoinSet<()>,
}

impl Conn {
    /// Connects to node `node` (None if it is down or does not answer in time).
    pub async fn open(o: Owner<'_>, node: usize) -> Option<Conn> {
        let addr = o.ctx.nodes.get(node)?.addr().await?;
        let path = format!(
            "/v1/ws?token={}&sessionId=u{}-d{}",
            o.token, o.user, o.device
        );
        let ws = tokio::time::timeout(CONNECT_DEADLINE, crate::client::ws_connect(addr, &path));
        let ws = ws.await.ok()?.ok()?;
        let id = o.ctx.next_conn.fetch_add(1, Ordering::SeqCst);
        let (sink, mut stream) = ws.split();
        let stop = CancellationToken::new();
        let (rec, tx, token) = (o.ctx.rec.clone(), o.inbox.clone(), stop.clone());
        let (user, device) = (o.user, o.device);
        rec.push(user, device, id, node, What::Connected);
        o.readers.spawn(async move {
            loop {
                let next = tokio::select! {
                    () = token.cancelled() => return,
                    n = stream.next() => n,
                };
                let text = match next {
                    Some(Ok(Message::Text(t))) => t,
                    Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                    Some(Ok(_)) => continue,
                };
                let raw: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                let frame = Frame::from_json(&raw);
                rec.push(user, device, id, node, What::Frame(frame.clone()));
                let _ = tx.send(Inbox::Frame {
                    device,
                    conn: id,
                    frame: Box::new(frame),
                    raw,
                });
            }
            rec.push(
                user,
                device,
                id,
                node,
                What::Disconnected("closed by server".into()),
            );
            let _ = tx.send(Inbox::Closed { device, conn: id });
        });
        Some(Conn {
            id,
            node,
            user,
            device,
            sink,
            stop,
        })
    }

    /// Sends a frame; false if the connection is broken or stuck.
    pub async fn send(&mut self, frame: &Value) -> bool {
        let msg = Message::text(frame.to_string());
        matches!(
            tokio::time::timeout(SEND_DEADLINE, self.sink.send(msg)).await,
            Ok(Ok(()))
        )
    }

    /// The client drops the connection (recorded before its reader stops).
    pub async fn close(mut self, rec: &Recorder, why: &str) {
        rec.push(
            self.user,
            self.device,
            self.id,
            self.node,
            What::Disconnected(why.into()),
        );
        self.stop.cancel();
        let _ = tokio::time::timeout(SEND_DEADLINE, self.sink.close()).await;
    }
}
