//! Store writes: every `ai_response_completed` that chatd acknowledged with `stored: true`
//! reads back byte-equal after the run (`get_chat_messages`, recorded as `Readback`).

use std::collections::HashMap;

use super::{Verdict, Violation};
use crate::chaos::history::{Event, What};

pub fn check(events: &[Event], verdict: &mut Verdict) -> Vec<Violation> {
    // (conn, chat, message) -> content of the last write sent on that connection.
    let mut sent: HashMap<(u64, &str, &str), &str> = HashMap::new();
    let mut acked: Vec<(usize, u32, &str, &str, &str)> = Vec::new();
    let mut read: HashMap<(u32, &str), HashMap<&str, &str>> = HashMap::new();
    for (at, e) in events.iter().enumerate() {
        match &e.what {
            What::StoreSent {
                chat,
                message,
                content,
            } => {
                sent.insert((e.conn, chat, message), content);
            }
            What::Frame(f) if f.kind == "ai_response_storage_confirmed" && f.stored => {
                if let Some(content) = sent.get(&(e.conn, f.chat.as_str(), f.message.as_str())) {
                    acked.push((at, e.user, &f.chat, &f.message, content));
                }
            }
            What::Readback { chat, messages } => {
                let m = read.entry((e.user, chat)).or_default();
                m.extend(messages.iter().map(|(id, c)| (id.as_str(), c.as_str())));
            }
            _ => {}
        }
    }
    verdict.stores_acked += acked.len();
    let mut out = Vec::new();
    for (at, user, chat, message, content) in acked {
        // A chat the run could not read back is not judged (the read failed, not the store).
        let Some(stored) = read.get(&(user, chat)) else {
            continue;
        };
        let detail = match stored.get(message) {
            None => format!("stored answer {message} in {chat} is gone"),
            Some(c) if c != &content => {
                format!("stored answer {message} in {chat} reads back as {c:?}, not {content:?}")
            }
            Some(_) => continue,
        };
        let kind = if stored.contains_key(message) {
            "store_differs"
        } else {
            "store_lost"
        };
        out.push(Violation { kind, at, detail });
    }
    out
}
