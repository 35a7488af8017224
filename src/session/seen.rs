//! Message ids a user sent before in a chat: a copy of an answered message is confirmed,
//! and a device that never had that answer gets it as a resume from 0; a re-send of one
//! not answered yet goes on to admission, which tells whether its turn runs, waits or
//! never started.

use chatd_protocol::{ChatMessageConfirmed, ErrorCode, ErrorPayload, ResumeAiTask, ServerMessage};

use super::Session;
use crate::cache::ai::MessageSeen;

impl Session {
    /// A message id this user sent in this chat before is not answered again: the sender
    /// gets `chat_message_confirmed` (its copy arrived; a client that re-sends after a
    /// lost confirmation is satisfied) and nothing is answered again; a device that never
    /// had the answer gets that turn as it would for `resume_ai_task` from 0 (boxed: the
    /// resume is rare, and kept out of every message's future). A re-send after
    /// `request_chat_history` or `request_chat_embeds`, or one that carries the history, is
    /// no duplicate until the message was answered (and is not counted again). The cache
    /// down: the message is taken as new (availability first).
    pub(super) async fn seen(
        &self,
        chat: &chatd_protocol::ChatId,
        msg: &chatd_protocol::UserMessage,
        stored: Option<&chatd_protocol::ChatVersions>,
    ) -> Seen {
        let cache = &self.app.ai_cache;
        let owner = &self.device.user_hash;
        let seen = match cache.claim_message(owner, chat, &msg.message_id).await {
            Ok(seen) => seen,
            Err(e) => {
                tracing::warn!(error = %e, "cannot check the message id; taking the message");
                return Seen::New;
            }
        };
        let answered_by = match &seen {
            MessageSeen::Answered(task) => task.clone(),
            _ => None,
        };
        let seen = match seen {
            MessageSeen::New => Seen::New,
            MessageSeen::AwaitingHistory => Seen::Resend { asked: true },
            // Not answered yet: its turn runs, or waits, or never started (its node stopped
            // between taking the id and admitting it). Admission tells which (and starts it
            // in the last case); nothing is answered twice.
            MessageSeen::Sent => Seen::Resend { asked: false },
            MessageSeen::Answered(_) => Seen::Duplicate,
        };
        let plain_copy = seen != Seen::New && msg.message_history.is_none();
        if plain_copy && self.reused(chat, msg).await {
            let mut p = ErrorPayload::new(
                ErrorCode::MessageIdReused,
                "this message id belongs to another message of the chat; a new message needs a new id",
            );
            p.chat_id = Some(chat.clone());
            p.message_id = Some(msg.message_id.clone());
            self.reply(ServerMessage::Error(p));
            return Seen::Duplicate;
        } else if seen == Seen::Duplicate {
            let messages_v = match cache.messages_v(owner, chat).await {
                Ok(Some(v)) => v,
                _ => stored.map_or(0, |v| v.messages_v),
            };
            self.reply(ServerMessage::ChatMessageConfirmed(ChatMessageConfirmed {
                chat_id: chat.clone(),
                message_id: msg.message_id.clone(),
                temp_id: msg.temp_id.clone(),
                new_messages_v: messages_v,
                new_last_edited_overall_timestamp: stored
                    .map_or(msg.created_at, |v| v.last_edited_overall_timestamp),
            }));
            // A device that never had the answer (its copy came because it heard of no
            // turn: its node was out while the message was answered) gets it now.
            if let Some(task) = answered_by.filter(|t| !self.device.follows(t)) {
                let resume = ResumeAiTask {
                    chat_id: chat.clone(),
                    task_id: task,
                    last_sequence: 0,
                };
                Box::pin(self.resume_ai_task(resume)).await;
            }
        }
        seen
    }

    /// The id is the chat's, but the content is not the message the AI cache holds under
    /// it (checked only for ids seen before, and only while the cache holds the chat).
    async fn reused(
        &self,
        chat: &chatd_protocol::ChatId,
        msg: &chatd_protocol::UserMessage,
    ) -> bool {
        let loaded = self.app.ai_cache.load(&self.device.user_hash, chat).await;
        let Ok(crate::cache::ai::Loaded::Present { messages, .. }) = loaded else {
            return false;
        };
        messages
            .iter()
            .any(|m| m.message_id == msg.message_id && m.content != msg.content)
    }

    /// The message was not taken (the turn store refused it): it may be sent again.
    pub(super) async fn release(
        &self,
        chat: &chatd_protocol::ChatId,
        message: &chatd_protocol::MessageId,
    ) {
        let cache = &self.app.ai_cache;
        if let Err(e) = cache
            .release_message(&self.device.user_hash, chat, message)
            .await
        {
            tracing::warn!(error = %e, "cannot release a message id");
        }
    }
}

/// What the chat's record of message ids says of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    New,
    /// Sent before and not answered: the answer to a history or embeds request (`asked`),
    /// or a copy that carries the history.
    Resend {
        asked: bool,
    },
    /// Sent (or answered) before: acknowledged, nothing else.
    Duplicate,
}
