//! A compressed history: a chat's newest compressed message (chatd's summary of its oldest
//! messages, role `system` with `replaces_through` set; see `crate::turn::compress`) stands
//! for every message up to the one it names. The model's view of a chat is that message
//! first, then the messages after `replaces_through` in order (older compressed messages
//! left out); a chat without one is seen as it is. The same rule holds for the AI cache
//! (where the compressed message was appended after the messages it follows) and for a
//! history the client re-sent (where it sits where the client keeps it).

use chatd_protocol::Role;

use crate::cache::ai::CachedMessage;
use crate::pipeline::HistoryRole;

/// Whether `m` is a compressed message.
pub fn is_compressed(m: &CachedMessage) -> bool {
    m.replaces_through.is_some()
}

/// The messages of `messages` (oldest first) the model gets. A `replaces_through` the list
/// does not hold (the cache evicted it, the client lacks it) leaves every message after
/// the compressed one: nothing is lost, some may be said twice.
pub fn view(messages: &[CachedMessage]) -> Vec<&CachedMessage> {
    let Some(latest) = messages.iter().rev().find(|m| is_compressed(m)) else {
        return messages.iter().collect();
    };
    let through = latest.replaces_through.as_ref();
    let start = messages
        .iter()
        .position(|m| Some(&m.message_id) == through)
        .map_or(0, |i| i + 1);
    std::iter::once(latest)
        .chain(messages[start..].iter().filter(|m| !is_compressed(m)))
        .collect()
}

/// How the model reads `m`: a compressed message as quoted data, the rest by role.
pub fn history_role(m: &CachedMessage) -> HistoryRole {
    if is_compressed(m) {
        return HistoryRole::Compressed;
    }
    match m.role {
        Role::User => HistoryRole::User,
        Role::Assistant => HistoryRole::Assistant,
        Role::System => HistoryRole::System,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chatd_protocol::MessageId;

    fn m(id: &str, role: Role, through: Option<&str>) -> CachedMessage {
        CachedMessage {
            message_id: MessageId::parse(id).unwrap(),
            role,
            content: format!("text of {id}"),
            created_at: 0,
            category: None,
            model_name: None,
            token_count: None,
            replaces_through: through.map(|t| MessageId::parse(t).unwrap()),
        }
    }

    fn ids(v: &[&CachedMessage]) -> Vec<String> {
        v.iter().map(|m| m.message_id.to_string()).collect()
    }

    #[test]
    fn the_newest_compressed_message_stands_for_everything_up_to_its_mark() {
        let plain = vec![m("a", Role::User, None), m("b", Role::Assistant, None)];
        assert_eq!(ids(&view(&plain)), ["a", "b"]);
        // Appended after the answer (the cache), or placed by the client: the same view.
        let chat = vec![
            m("u1", Role::User, None),
            m("a1", Role::Assistant, None),
            m("c1", Role::System, Some("a1")),
            m("u2", Role::User, None),
            m("a2", Role::Assistant, None),
            m("c2", Role::System, Some("a2")),
            m("u3", Role::User, None),
        ];
        assert_eq!(ids(&view(&chat)), ["c2", "u3"]);
        assert_eq!(ids(&view(&chat[..5])), ["c1", "u2", "a2"]);
        assert_eq!(history_role(&chat[2]), HistoryRole::Compressed);
        assert_eq!(history_role(&chat[0]), HistoryRole::User);
        // Its mark evicted: every message after it stays.
        let evicted = vec![
            m("c1", Role::System, Some("gone")),
            m("u2", Role::User, None),
        ];
        assert_eq!(ids(&view(&evicted)), ["c1", "u2"]);
    }
}
