//! A user message (`chat_message_added`): its shape, the chat's owner (the store, or the
//! first writer's claim for a chat no client stored yet), its place in the chat's
//! `messages_v`, the turn that answers it (started here, or queued behind the running one
//! on any node), and once the turns hold it the confirmation to every device and the relay
//! to the others.

use chatd_protocol::{
    AiTaskInitiated, ChatId, ChatMessageAdded, ChatMessageConfirmed, ErrorCode, ErrorPayload,
    MessageId, MessageQueued, NewChatMessage, Role, ServerMessage, UserMessage,
};

use super::seen::Seen;
use super::{MAX_CONTENT_BYTES, Session};
use crate::delivery::Audience;
use crate::store::StoreError;
use crate::turn::{self, Admission, Inbound, MessageOptions};

impl Session {
    /// A user message: claimed in the store (which owns the chat and its `messages_v`),
    /// answered or queued, and meanwhile confirmed to every device, relayed to the others.
    pub(super) async fn chat_message_added(&self, mut m: ChatMessageAdded) {
        // Duplicated and incognito chats send their history at the top level.
        m.take_history_into_message();
        let options = MessageOptions::from_message(&m);
        let msg = m.message;
        if !self.message_acceptable(&m.chat_id, &msg) {
            return;
        }
        let Some(count) = self.count_message(&m.chat_id, &msg).await else {
            return;
        };
        self.device.set_active_chat(Some(m.chat_id.clone()));
        let announced = announcement(&m.chat_id, &msg, &count, m.encrypted_chat_key.as_deref());
        let message_id = msg.message_id.clone();
        let inbound = Inbound {
            message: msg,
            embeds: m.embeds,
            conn: self.device.conn_id,
            prior_messages: count.messages_v - 1,
            history_requested: count.asked,
            options,
        };
        self.admit(m.chat_id, message_id, inbound, announced).await;
    }

    /// An error answering the message (named by chat and id, so every device can tell
    /// which message failed).
    fn message_error(
        &self,
        code: ErrorCode,
        text: impl Into<String>,
        chat: &ChatId,
        message: &MessageId,
    ) {
        let mut p = ErrorPayload::new(code, text);
        p.chat_id = Some(chat.clone());
        p.message_id = Some(message.clone());
        self.reply(ServerMessage::Error(p));
    }

    /// The message's shape (a user's, with content in bounds and a history in bounds) and
    /// a server that is not stopping; false after answering the error.
    fn message_acceptable(&self, chat: &ChatId, msg: &UserMessage) -> bool {
        if msg.role != Role::User {
            let text = "message.role must be \"user\"";
            self.message_error(ErrorCode::InvalidPayload, text, chat, &msg.message_id);
            return false;
        }
        if msg.content.trim().is_empty() || msg.content.len() > MAX_CONTENT_BYTES {
            let text = format!("message.content must be 1 to {MAX_CONTENT_BYTES} bytes");
            self.message_error(ErrorCode::InvalidPayload, text, chat, &msg.message_id);
            return false;
        }
        if let Some(history) = &msg.message_history
            && let Err(reason) = check_history(history)
        {
            let code = ErrorCode::InvalidChatHistory;
            self.message_error(code, reason, chat, &msg.message_id);
            return false;
        }
        if self.app.tasks.draining.is_cancelled() {
            // Stopping: nothing of the message is taken here (running answers finish); the
            // client sends it again once reconnected.
            let text = "this server is stopping; reconnect and send the message again";
            self.message_error(ErrorCode::Overloaded, text, chat, &msg.message_id);
            return false;
        }
        true
    }

    /// What tells the devices the message was taken (once the chat's turns hold it).
    fn announce(&self, announced: Announcement) {
        self.broadcast(Audience::All, &announced.confirmed);
        if let Some(new) = &announced.relayed {
            self.broadcast(Audience::AllExcept(self.device.conn_id), new);
        }
    }

    /// Hands the message to the chat's turns: answered now (a turn starts), queued behind
    /// the running answer, or refused (when the turns fail or the queue is full, its id is
    /// released so it may be sent again; a chat that is another user's is `forbidden`).
    /// The devices learn it was taken (`announced`) only once the turn store holds it: a
    /// node that stops before that leaves the message unconfirmed, and the client sends it
    /// again (taken as a re-send) instead of waiting for an answer no node will give.
    async fn admit(
        &self,
        chat: ChatId,
        message_id: MessageId,
        inbound: Inbound,
        announced: Announcement,
    ) {
        let user = &self.device.user;
        let turns = &self.app.turns;
        let admission = match turns
            .admit(user, &chat, inbound, &self.app.tasks.turns_shutdown)
            .await
        {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "cannot admit the message");
                self.release(&chat, &message_id).await;
                let (code, text) = e.user_error();
                let mut p = ErrorPayload::new(code, text);
                p.chat_id = Some(chat);
                p.message_id = Some(message_id);
                return self.reply(ServerMessage::Error(p));
            }
        };
        if matches!(
            admission,
            Admission::Start(_) | Admission::Queued { .. } | Admission::Running { .. }
        ) {
            self.announce(announced);
        }
        match admission {
            Admission::Start(ticket) => {
                turn::spawn(self.app.turn.clone(), user.clone(), chat, *ticket)
            }
            Admission::Queued { active_task_id } => {
                self.reply(ServerMessage::MessageQueued(MessageQueued {
                    chat_id: chat,
                    user_message_id: message_id,
                    active_task_id,
                    message: "A response is in progress; this message will be answered next."
                        .into(),
                }))
            }
            // A re-send of the message being answered: the device learns the task (and
            // can resume it); nothing is answered twice.
            Admission::Running { active_task_id } => {
                self.reply(ServerMessage::AiTaskInitiated(AiTaskInitiated {
                    chat_id: chat,
                    user_message_id: message_id,
                    ai_task_id: active_task_id,
                    status: "already_processing".into(),
                }))
            }
            Admission::QueueFull => {
                self.release(&chat, &message_id).await;
                let mut p = ErrorPayload::new(
                    ErrorCode::Overloaded,
                    "too many messages are waiting in this chat",
                );
                p.chat_id = Some(chat);
                p.message_id = Some(message_id);
                self.reply(ServerMessage::Error(p));
            }
            Admission::Foreign => {
                self.store_failed(StoreError::Forbidden, Some(&chat), Some(&message_id))
            }
        }
    }

    /// Checks the chat's owner in the permanent store when this node does not know it (a
    /// chat no one stored yet is free: it becomes the user's when the client stores it),
    /// and counts the message in the chat's shared `messages_v` (a re-send with history
    /// is not counted again). `None` after answering the error.
    async fn count_message(
        &self,
        chat: &chatd_protocol::ChatId,
        msg: &chatd_protocol::UserMessage,
    ) -> Option<Counted> {
        let user = &self.device.user;
        let app = &self.app;
        let mut stored = None;
        let cache = &app.ai_cache;
        let owner = &self.device.user_hash;
        if !app.owners.known(user, chat) {
            let versions = match app.store.chat_versions(user, chat).await {
                Ok(v) => v,
                Err(e) => {
                    self.store_failed(e, Some(chat), Some(&msg.message_id));
                    return None;
                }
            };
            // A chat no client stored yet belongs to its first writer (claimed in the
            // shared cache until the client stores it).
            if versions.is_none() {
                match cache.claim_chat(owner, chat).await {
                    Ok(true) => {}
                    Ok(false) => {
                        self.store_failed(StoreError::Forbidden, Some(chat), Some(&msg.message_id));
                        return None;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot claim a new chat");
                        let text = "the cache is unavailable; try again shortly";
                        let code = ErrorCode::CacheUnavailable;
                        self.message_error(code, text, chat, &msg.message_id);
                        return None;
                    }
                }
            }
            stored = Some(versions.unwrap_or_default());
            app.owners.remember(user, chat);
        }
        let (resend, asked) = match self.seen(chat, msg, stored.as_ref()).await {
            Seen::Duplicate => return None,
            Seen::Resend { asked } => (true, asked),
            Seen::New => (false, false),
        };
        let counted = if resend {
            cache.messages_v(owner, chat).await
        } else {
            cache.bump_messages_v(owner, chat, None).await
        };
        if let Ok(Some(messages_v)) = counted {
            let last_edited = stored.map_or(0, |v| v.last_edited_overall_timestamp);
            return Some(Counted {
                messages_v,
                last_edited,
                resend,
                asked,
            });
        }
        // The cache has no count (new, expired or down): the store's is the seed.
        let stored = match stored {
            Some(v) => v,
            None => match app.store.chat_versions(user, chat).await {
                Ok(v) => v.unwrap_or_default(),
                Err(e) => {
                    self.store_failed(e, Some(chat), Some(&msg.message_id));
                    return None;
                }
            },
        };
        let seeded = cache
            .bump_messages_v(owner, chat, Some(stored.messages_v))
            .await;
        Some(Counted {
            messages_v: seeded.ok().flatten().unwrap_or(stored.messages_v + 1),
            last_edited: stored.last_edited_overall_timestamp,
            resend,
            asked,
        })
    }
}

/// `chat_message_confirmed` for every device and, unless it is a re-send, the message
/// for the others.
struct Announcement {
    confirmed: ServerMessage,
    relayed: Option<ServerMessage>,
}

fn announcement(
    chat: &ChatId,
    msg: &UserMessage,
    count: &Counted,
    encrypted_chat_key: Option<&str>,
) -> Announcement {
    let messages_v = count.messages_v;
    let last_edited = count.last_edited.max(msg.created_at);
    let confirmed = ServerMessage::ChatMessageConfirmed(ChatMessageConfirmed {
        chat_id: chat.clone(),
        message_id: msg.message_id.clone(),
        temp_id: msg.temp_id.clone(),
        new_messages_v: messages_v,
        new_last_edited_overall_timestamp: last_edited,
    });
    // A re-send (the answer to `request_chat_history` or `request_chat_embeds`): the
    // other devices have the message already.
    let relayed = (!count.resend).then(|| {
        ServerMessage::NewChatMessage(NewChatMessage {
            chat_id: chat.clone(),
            message_id: msg.message_id.clone(),
            role: Role::User,
            sender_name: msg.sender_name.clone(),
            content: msg.content.clone(),
            created_at: msg.created_at,
            messages_v,
            last_edited_overall_timestamp: last_edited,
            encrypted_chat_key: encrypted_chat_key.map(String::from),
        })
    });
    Announcement { confirmed, relayed }
}

/// A user message's place in its chat.
struct Counted {
    /// The chat's `messages_v` with this message.
    messages_v: u64,
    /// The newest edit the store knows of (0 when it was not asked).
    last_edited: i64,
    /// The client re-sent a message the server asked about (counted and relayed before).
    resend: bool,
    /// The server asked for this message's history or embeds (on any node).
    asked: bool,
}

/// Shape checks of a re-sent history that need no state. Every role is accepted (the
/// client re-sends the chat's system messages too) and empty entries are skipped later;
/// an entry over the content limit is refused.
fn check_history(history: &[chatd_protocol::HistoryMessage]) -> Result<(), String> {
    match history.iter().find(|h| h.content.len() > MAX_CONTENT_BYTES) {
        Some(h) => Err(format!(
            "message_history entry {} has more than {MAX_CONTENT_BYTES} bytes of content",
            h.message_id
        )),
        None => Ok(()),
    }
}
