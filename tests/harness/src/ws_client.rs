//! A typed WebSocket client for tests and load runs, built on `chatd-protocol`: send
//! [`ClientMessage`]s, receive [`ServerMessage`]s with a deadline, wait for a specific
//! frame, observe the close code. TCP_NODELAY is set on its socket.

use std::time::Duration;

use anyhow::{Context, bail};
use chatd_protocol::{ClientMessage, ServerMessage};
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::{Frame, FrameHeader};
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long `recv` waits for a frame before failing the test.
pub const RECV_DEADLINE: Duration = Duration::from_secs(15);

pub struct WsClient {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

/// How a connection attempt ended when the server refused the upgrade.
#[derive(Debug)]
pub enum Refused {
    Http(u16),
    Other(String),
}

impl WsClient {
    /// Connects to `url` (e.g. `ws://127.0.0.1:P/v1/ws?token=...`).
    pub async fn connect(url: &str) -> anyhow::Result<WsClient> {
        let request = url.into_client_request().context("bad websocket url")?;
        Self::connect_request(request)
            .await
            .map_err(|e| anyhow::anyhow!("websocket connect to {url} failed: {e:?}"))
    }

    /// Connects with a prepared request (extra headers such as Origin or Cookie).
    pub async fn connect_request(
        request: tungstenite::handshake::client::Request,
    ) -> Result<WsClient, Refused> {
        Self::connect_with_protocol(request).await.map(|(ws, _)| ws)
    }

    /// As [`WsClient::connect_request`], also returning the subprotocol the server selected
    /// (`Sec-WebSocket-Protocol` of its answer; the client library has already checked
    /// that it is one the request offered).
    pub async fn connect_with_protocol(
        request: tungstenite::handshake::client::Request,
    ) -> Result<(WsClient, Option<String>), Refused> {
        match Self::handshake(request).await? {
            Ok(accepted) => Ok(accepted),
            Err((status, _)) => Err(Refused::Http(status)),
        }
    }

    /// The status and body (chatd's reason) of a refused upgrade; fails if it was accepted.
    pub async fn refusal(
        request: tungstenite::handshake::client::Request,
    ) -> anyhow::Result<(u16, String)> {
        match Self::handshake(request).await {
            Ok(Err(refused)) => Ok(refused),
            Ok(Ok(_)) => bail!("the server accepted the upgrade"),
            Err(e) => bail!("no HTTP answer: {e:?}"),
        }
    }

    async fn handshake(
        request: tungstenite::handshake::client::Request,
    ) -> Result<Result<(WsClient, Option<String>), (u16, String)>, Refused> {
        let host = request.uri().host().unwrap_or("127.0.0.1").to_string();
        let port = request.uri().port_u16().unwrap_or(80);
        let tcp = TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| Refused::Other(e.to_string()))?;
        tcp.set_nodelay(true)
            .map_err(|e| Refused::Other(e.to_string()))?;
        match tokio_tungstenite::client_async(request, MaybeTlsStream::Plain(tcp)).await {
            Ok((ws, response)) => {
                let protocol = response
                    .headers()
                    .get("sec-websocket-protocol")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                Ok(Ok((WsClient { ws }, protocol)))
            }
            Err(tungstenite::Error::Http(resp)) => {
                let body = resp
                    .body()
                    .as_deref()
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .unwrap_or_default();
                Ok(Err((resp.status().as_u16(), body)))
            }
            Err(e) => Err(Refused::Other(e.to_string())),
        }
    }

    pub async fn send(&mut self, msg: &ClientMessage) {
        let text = serde_json::to_string(msg).unwrap_or_default();
        self.send_text(text).await;
    }

    pub async fn send_json(&mut self, value: serde_json::Value) {
        self.send_text(value.to_string()).await;
    }

    pub async fn send_text(&mut self, text: impl Into<String>) {
        self.send_raw(Message::text(text.into())).await;
    }

    pub async fn send_raw(&mut self, msg: Message) {
        if let Err(e) = self.ws.send(msg).await {
            panic!("websocket send failed: {e}");
        }
    }

    /// Sends a text frame whose payload is not valid UTF-8.
    pub async fn send_invalid_utf8(&mut self) {
        let frame = Frame::from_payload(
            FrameHeader {
                opcode: OpCode::Data(Data::Text),
                ..FrameHeader::default()
            },
            vec![0x7b, 0xff, 0xfe, 0x7d].into(),
        );
        self.send_raw(Message::Frame(frame)).await;
    }

    /// The next server message (pings and pongs skipped); fails on close or after the deadline.
    pub async fn recv(&mut self) -> ServerMessage {
        match self.try_recv(RECV_DEADLINE).await {
            Ok(Some(msg)) => msg,
            Ok(None) => panic!("connection closed while waiting for a frame"),
            Err(e) => panic!("{e}"),
        }
    }

    /// The next message within `deadline`: `Ok(None)` if the server closed the socket.
    pub async fn try_recv(&mut self, deadline: Duration) -> anyhow::Result<Option<ServerMessage>> {
        loop {
            let next = tokio::time::timeout(deadline, self.ws.next())
                .await
                .map_err(|_| anyhow::anyhow!("no frame from the server within {deadline:?}"))?;
            match next {
                None | Some(Ok(Message::Close(_))) => return Ok(None),
                Some(Ok(Message::Text(text))) => {
                    let msg = serde_json::from_str(text.as_str())
                        .with_context(|| format!("server sent an unreadable frame: {text}"))?;
                    return Ok(Some(msg));
                }
                Some(Ok(Message::Binary(_))) => bail!("server sent a binary frame"),
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e.into()),
            }
        }
    }

    /// Receives until `pick` returns `Some`, skipping other frames; fails after the deadline.
    pub async fn recv_until<T>(&mut self, mut pick: impl FnMut(&ServerMessage) -> Option<T>) -> T {
        let start = tokio::time::Instant::now();
        let mut skipped = Vec::new();
        loop {
            let left = RECV_DEADLINE.saturating_sub(start.elapsed());
            match self.try_recv(left).await {
                Ok(Some(msg)) => {
                    if let Some(t) = pick(&msg) {
                        return t;
                    }
                    skipped.push(msg.type_name());
                }
                Ok(None) => panic!("connection closed; skipped frames: {skipped:?}"),
                Err(e) => panic!("{e}; skipped frames: {skipped:?}"),
            }
        }
    }

    /// Reads until the server's close frame; returns its code and reason.
    pub async fn expect_close(&mut self) -> (u16, String) {
        let deadline = tokio::time::Instant::now() + RECV_DEADLINE;
        loop {
            let next = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .unwrap_or_else(|_| panic!("no close frame within {RECV_DEADLINE:?}"));
            match next {
                Some(Ok(Message::Close(Some(frame)))) => {
                    return (u16::from(frame.code), frame.reason.to_string());
                }
                Some(Ok(Message::Close(None))) => return (1005, String::new()),
                Some(Ok(_)) => continue,
                Some(Err(e)) => panic!("socket failed before a close frame arrived: {e}"),
                None => panic!("socket ended without a close frame"),
            }
        }
    }

    /// Starts the closing handshake; returns true when the server answered with its own
    /// close frame and then ended the stream cleanly.
    pub async fn close(mut self) -> bool {
        if self.ws.close(None).await.is_err() {
            return false;
        }
        loop {
            match tokio::time::timeout(RECV_DEADLINE, self.ws.next()).await {
                Ok(Some(Ok(_))) => continue,
                // tungstenite reports the completed handshake as ConnectionClosed / end of stream.
                Ok(None) | Ok(Some(Err(tungstenite::Error::ConnectionClosed))) => return true,
                Ok(Some(Err(_))) | Err(_) => return false,
            }
        }
    }
}
