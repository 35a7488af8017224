//! The kinds of `emit` a routine may send (`status`, `message`, `information`, `error`)
//! and the routine event each becomes. The catalog's lint checks a script's literal kinds
//! against them; the slice checks and sends them.

use chatd_protocol::MessageId;

use crate::pipeline::RoutineEventKind;

/// What `emit` may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmitKind {
    Status,
    Message,
    Information,
    Error,
}

impl EmitKind {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "status" => Self::Status,
            "message" => Self::Message,
            "information" => Self::Information,
            "error" => Self::Error,
            _ => return None,
        })
    }

    /// The routine event that sends `text` (as message `message_id` for a `message`).
    pub(super) fn event(self, text: String, message_id: MessageId) -> RoutineEventKind {
        match self {
            Self::Status => RoutineEventKind::Status(text),
            Self::Message => RoutineEventKind::Message { message_id, text },
            Self::Information => RoutineEventKind::Information(text),
            Self::Error => RoutineEventKind::Error {
                message: text,
                code: None,
            },
        }
    }
}
