//! WebSocket close codes chatd sends, with their documented meaning.

/// A close code chatd uses when it ends a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseCode {
    /// 1000: normal closure (answering a client's close).
    Normal,
    /// 1012: the server is restarting or stopping (after `server_shutting_down`);
    /// reconnect at once (another node takes the connection).
    ServiceRestart,
    /// 1007: a text frame held invalid UTF-8.
    InvalidUtf8,
    /// 1002: the client broke the WebSocket protocol (e.g. an unmasked or malformed frame).
    ProtocolError,
    /// 1009: a message exceeded the transport limit (`server.max_message_bytes`).
    MessageTooBig,
    /// 1011: unexpected server error.
    InternalError,
    /// 4001: the client read too slowly: its outbox stayed over `server.outbox_bytes` for
    /// `server.slow_consumer_grace`, reached twice it, or `server.outbox_capacity` frames, or
    /// a write to its socket blocked for 10 s.
    SlowConsumer,
    /// 4002: the session token reached its `exp` (send `refresh_token` before it does, or
    /// reconnect with a fresh token).
    TokenExpired,
}

impl CloseCode {
    pub fn code(self) -> u16 {
        match self {
            CloseCode::Normal => 1000,
            CloseCode::ServiceRestart => 1012,
            CloseCode::InvalidUtf8 => 1007,
            CloseCode::ProtocolError => 1002,
            CloseCode::MessageTooBig => 1009,
            CloseCode::InternalError => 1011,
            CloseCode::SlowConsumer => 4001,
            CloseCode::TokenExpired => 4002,
        }
    }

    /// The reason text sent with the close frame.
    pub fn reason(self) -> &'static str {
        match self {
            CloseCode::Normal => "bye",
            CloseCode::ServiceRestart => "server restarting; reconnect",
            CloseCode::InvalidUtf8 => "invalid utf-8 in text frame",
            CloseCode::ProtocolError => "websocket protocol error",
            CloseCode::MessageTooBig => "message too big",
            CloseCode::InternalError => "internal error",
            CloseCode::SlowConsumer => "slow consumer: outbox full",
            CloseCode::TokenExpired => "token expired; reconnect with a fresh token",
        }
    }
}
