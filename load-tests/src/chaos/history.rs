//! The recorded history of a chaos run: every frame every device received (with the time
//! and the connection it came on), every message, resume, cancel and store write sent, and
//! every fault the nemesis injected. The checker reads only this.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;

/// One thing that happened, at `at_ms` after the run started. `user`, `device` and `conn`
/// are 0 for the nemesis's events; `conn` numbers every WebSocket connection of the run.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub at_ms: u64,
    pub user: u32,
    pub device: u32,
    pub conn: u64,
    pub node: usize,
    pub what: What,
}

#[derive(Clone, Debug, PartialEq)]
pub enum What {
    Connected,
    Disconnected(String),
    /// `chat_message_added` (again, with its history, when `resend`).
    Sent {
        chat: String,
        message: String,
        resend: bool,
    },
    ResumeSent {
        chat: String,
        task: String,
        last_sequence: u64,
    },
    CancelSent {
        task: String,
    },
    /// `ai_response_completed` with this (fake) ciphertext.
    StoreSent {
        chat: String,
        message: String,
        content: String,
    },
    Frame(Frame),
    /// After the run: the assistant messages `get_chat_messages` returned for a chat
    /// (message id, encrypted content).
    Readback {
        chat: String,
        messages: Vec<(String, String)>,
    },
    Fault {
        kind: String,
        detail: String,
        /// How long the fault lasted (0 for an instant one).
        lasted_ms: u64,
    },
}

/// The fields of a server frame the checker looks at (absent ones empty / false / 0).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Frame {
    pub kind: String,
    pub chat: String,
    pub task: String,
    pub user_message: String,
    pub message: String,
    pub sequence: u64,
    pub is_final: bool,
    pub error_code: String,
    pub revoked: bool,
    pub shutdown: bool,
    pub recovered: bool,
    pub stored: bool,
    pub text: String,
}

fn s(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("").to_string()
}

fn b(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

impl Frame {
    /// Reads a server frame `{"type", "payload"}`; a frame of another shape keeps its type.
    pub fn from_json(v: &Value) -> Frame {
        let p = v.get("payload").cloned().unwrap_or(Value::Null);
        let kind = s(v, "type");
        let mut task = s(&p, "task_id");
        for key in ["ai_task_id", "active_task_id"] {
            if task.is_empty() {
                task = s(&p, key);
            }
        }
        if task.is_empty() && kind == "ai_typing_started" {
            task = s(&p, "message_id");
        }
        let mut text = s(&p, "full_content_so_far");
        for key in ["full_content", "content"] {
            if text.is_empty() {
                text = s(&p, key);
            }
        }
        let is_final = b(&p, "is_final_chunk");
        let mut error_code = s(&p, "error_code");
        if kind == "error" {
            error_code = s(&p, "code");
        }
        Frame {
            chat: s(&p, "chat_id"),
            task,
            user_message: s(&p, "user_message_id"),
            message: s(&p, "message_id"),
            sequence: p.get("sequence").and_then(Value::as_u64).unwrap_or(0),
            is_final,
            error_code,
            revoked: b(&p, "interrupted_by_revocation"),
            shutdown: b(&p, "interrupted_by_shutdown"),
            recovered: b(&p, "recovered"),
            stored: b(&p, "stored"),
            text,
            kind,
        }
    }

    /// How a turn ended on a device, if this frame ends it there.
    pub fn ending(&self) -> Option<Ending> {
        let ends = match self.kind.as_str() {
            "ai_message_update" => self.is_final,
            "ai_background_response_completed" | "pending_ai_response" => true,
            _ => false,
        };
        if !ends {
            return None;
        }
        if self.kind == "pending_ai_response" {
            return Some(Ending::Pending);
        }
        Some(if !self.error_code.is_empty() {
            Ending::Error(self.error_code.clone())
        } else if self.revoked {
            Ending::Cancelled
        } else if self.shutdown {
            Ending::Shutdown
        } else {
            Ending::Answered
        })
    }
}

/// The outcome a device was given for a turn.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ending {
    Answered,
    /// `pending_ai_response`: the text, without the outcome.
    Pending,
    Cancelled,
    Shutdown,
    Error(String),
}

impl Ending {
    pub fn name(&self) -> String {
        match self {
            Ending::Answered => "answered".into(),
            Ending::Pending => "pending".into(),
            Ending::Cancelled => "cancelled".into(),
            Ending::Shutdown => "interrupted_by_shutdown".into(),
            Ending::Error(code) => code.clone(),
        }
    }
}

/// The chat ids of the run are `chaos-u{user}-c{n}`: the user a chat belongs to.
pub fn chat_owner(chat: &str) -> Option<u32> {
    let rest = chat.strip_prefix("chaos-u")?;
    rest.split_once("-c")?.0.parse().ok()
}

pub fn chat_id(user: u32, n: u32) -> String {
    format!("chaos-u{user}-c{n}")
}

/// Shared by every actor of the run; events are pushed in the order they happen.
#[derive(Clone)]
pub struct Recorder {
    start: Instant,
    events: Arc<Mutex<Vec<Event>>>,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            start: Instant::now(),
            events: Arc::new(Mutex::new(Vec::new())),
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    pub fn push(&self, user: u32, device: u32, conn: u64, node: usize, what: What) {
        let at_ms = self.now_ms();
        let event = Event {
            at_ms,
            user,
            device,
            conn,
            node,
            what,
        };
        match self.events.lock() {
            Ok(mut events) => events.push(event),
            Err(poisoned) => poisoned.into_inner().push(event),
        }
    }

    /// A fault that is over, recorded with the node it hit (0 for Redis's).
    pub fn fault(&self, kind: &str, node: usize, detail: String, lasted_ms: u64) {
        let what = What::Fault {
            kind: kind.to_string(),
            detail,
            lasted_ms,
        };
        self.push(0, 0, 0, node, what);
    }

    pub fn take(&self) -> Vec<Event> {
        match self.events.lock() {
            Ok(mut events) => std::mem::take(&mut *events),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_read_from_json_and_endings_typed() {
        let v = serde_json::json!({"type": "ai_message_update", "payload": {
            "task_id": "t1", "chat_id": "chaos-u3-c1", "user_message_id": "m1",
            "message_id": "t1", "full_content_so_far": "Sure.", "sequence": 4,
            "is_final_chunk": true, "error_code": "node_lost"}});
        let f = Frame::from_json(&v);
        assert_eq!((f.task.as_str(), f.sequence, f.is_final), ("t1", 4, true));
        assert_eq!(f.ending(), Some(Ending::Error("node_lost".into())));
        let typing = serde_json::json!({"type": "ai_typing_started",
            "payload": {"chat_id": "c", "message_id": "t2", "user_message_id": "m"}});
        assert_eq!(Frame::from_json(&typing).task, "t2");
        assert_eq!(Frame::from_json(&typing).ending(), None);
        assert_eq!(chat_owner("chaos-u12-c3"), Some(12));
        assert_eq!(chat_owner("other"), None);
        assert_eq!(chat_owner(&chat_id(5, 0)), Some(5));
    }
}
