//! A connection's session: rate limits, parsing, and exhaustive dispatch of every
//! [`ClientMessage`] with ownership checks. Bad input becomes a typed `error` frame and the
//! connection stays usable.

mod persist;
mod resume;
mod sync;

use std::num::NonZeroU32;
use std::sync::Arc;

use chatd_protocol::{
    ActiveChatSetAck, AiTaskCancelRequested, CancelAiTask, ChatMessageAdded, ChatMessageConfirmed,
    ClientMessage, Empty, ErrorCode, ErrorPayload, MessageQueued, NewChatMessage, Role,
    ServerMessage, SetActiveChat, parse_client_message,
};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use crate::delivery::{Audience, Device};
use crate::metrics::TypeLabel;
use crate::skills::CancelRefused;
use crate::state::AppState;
use crate::store::StoreError;
use crate::turn::{self, Admission, CancelError, Inbound, MessageOptions};

/// Longest user message accepted, in bytes.
const MAX_CONTENT_BYTES: usize = 256 * 1024;

/// One connection's message handling. Cloning shares it (the sync worker holds a clone).
#[derive(Clone)]
pub struct Session {
    app: Arc<AppState>,
    device: Arc<Device>,
    limiter: Arc<DefaultDirectRateLimiter>,
    /// Phased-sync requests waiting for this connection's sync worker (see `sync`).
    syncs: Arc<std::sync::OnceLock<tokio::sync::mpsc::Sender<chatd_protocol::PhasedSyncRequest>>>,
}

pub fn quota(rate: u32, burst: u32) -> Quota {
    let rate = NonZeroU32::new(rate).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
    Quota::per_second(rate).allow_burst(burst)
}

impl Session {
    pub fn new(app: Arc<AppState>, device: Arc<Device>) -> Self {
        let limits = &app.config.limits;
        let limiter = RateLimiter::direct(quota(limits.connection_rate, limits.connection_burst));
        Self {
            app,
            device,
            limiter: Arc::new(limiter),
            syncs: Arc::default(),
        }
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    fn reply(&self, msg: ServerMessage) {
        self.device.send(&msg);
    }

    /// Sends to the user's devices (on every node).
    fn broadcast(&self, audience: Audience, msg: &ServerMessage) {
        self.app
            .turn
            .delivery
            .send(&self.device.user_hash, audience, msg);
    }

    fn error(&self, code: ErrorCode, message: impl Into<String>) {
        self.reply(ServerMessage::Error(ErrorPayload::new(code, message)));
    }

    /// Handles one inbound text frame.
    pub async fn handle_text(&self, text: &str) {
        if text.len() > self.app.config.server.max_frame_bytes {
            self.count_in("oversized");
            self.error(
                ErrorCode::PayloadTooLarge,
                format!(
                    "frame of {} bytes exceeds the limit of {} bytes",
                    text.len(),
                    self.app.config.server.max_frame_bytes
                ),
            );
            return;
        }
        if self.limiter.check().is_err()
            || self.app.user_limiter.check_key(&self.device.user).is_err()
        {
            self.count_in("rate_limited");
            self.error(ErrorCode::RateLimited, "too many messages; slow down");
            return;
        }
        match parse_client_message(text) {
            Ok(msg) => {
                self.count_in(msg.type_name());
                self.dispatch(msg).await;
            }
            Err(e) => {
                self.count_in("invalid");
                let mut payload = ErrorPayload::new(e.code(), "the frame could not be read");
                payload.details = Some(e.to_string());
                self.reply(ServerMessage::Error(payload));
            }
        }
    }

    /// A binary frame: chatd speaks JSON text frames only.
    pub fn handle_binary(&self) {
        self.count_in("binary");
        self.error(
            ErrorCode::MalformedJson,
            "binary frames are not supported; send JSON text frames",
        );
    }

    fn count_in(&self, kind: &'static str) {
        self.app
            .metrics
            .frames_in
            .get_or_create(&TypeLabel { r#type: kind })
            .inc();
    }

    /// Persistence and sync messages are awaited here, so one device's writes apply in
    /// the order it sent them.
    async fn dispatch(&self, msg: ClientMessage) {
        match msg {
            ClientMessage::Ping(Empty {}) => self.reply(ServerMessage::Pong(Empty {})),
            ClientMessage::SetActiveChat(m) => {
                if let Some(chat) = &m.chat_id
                    && !self.stored_chat_allowed(chat, None).await
                {
                    return;
                }
                let chat = m.chat_id.clone();
                self.set_active_chat(m);
                if let Some(chat) = chat {
                    self.catch_up(&chat).await;
                }
            }
            ClientMessage::ChatMessageAdded(m) => self.chat_message_added(*m).await,
            ClientMessage::CancelSkill(m) => self.cancel_skill(m),
            ClientMessage::CancelAiTask(m) => self.cancel_ai_task(m).await,
            ClientMessage::EncryptedChatMetadata(m) => self.encrypted_chat_metadata(*m).await,
            ClientMessage::AiResponseCompleted(m) => self.ai_response_completed(*m).await,
            ClientMessage::UpdatePostProcessingMetadata(m) => {
                self.update_post_processing_metadata(*m).await
            }
            ClientMessage::UpdateTitle(m) => self.update_title(m).await,
            ClientMessage::DeleteChat(m) => self.delete_chat(m).await,
            ClientMessage::DeleteMessage(m) => self.delete_message(m).await,
            ClientMessage::StoreEmbed(m) => self.store_embed(*m).await,
            ClientMessage::StoreEmbedKeys(m) => self.store_embed_keys(m).await,
            ClientMessage::RequestEmbed(m) => self.request_embed(m).await,
            ClientMessage::PhasedSyncRequest(m) => self.queue_sync(*m),
            ClientMessage::ResumeAiTask(m) => self.resume_ai_task(m).await,
        }
    }

    fn set_active_chat(&self, m: SetActiveChat) {
        self.device.set_active_chat(m.chat_id.clone());
        self.reply(ServerMessage::ActiveChatSetAck(ActiveChatSetAck {
            chat_id: m.chat_id,
        }));
    }

    /// A user message: claimed in the store (which owns the chat and its `messages_v`),
    /// confirmed to every device, relayed to the others, then answered or queued.
    async fn chat_message_added(&self, m: ChatMessageAdded) {
        let user = &self.device.user;
        let options = MessageOptions::from_message(&m);
        let msg = m.message;
        if msg.role != Role::User {
            self.error(ErrorCode::InvalidPayload, "message.role must be \"user\"");
            return;
        }
        if msg.content.trim().is_empty() || msg.content.len() > MAX_CONTENT_BYTES {
            self.error(
                ErrorCode::InvalidPayload,
                format!("message.content must be 1 to {MAX_CONTENT_BYTES} bytes"),
            );
            return;
        }
        if let Some(history) = &msg.message_history
            && let Err(reason) = check_history(history)
        {
            let mut p = ErrorPayload::new(ErrorCode::InvalidChatHistory, reason);
            p.chat_id = Some(m.chat_id.clone());
            p.message_id = Some(msg.message_id.clone());
            self.reply(ServerMessage::Error(p));
            return;
        }
        let Some(count) = self.count_message(&m.chat_id, &msg).await else {
            return;
        };
        let messages_v = count.messages_v;
        let last_edited = count.last_edited.max(msg.created_at);
        self.device.set_active_chat(Some(m.chat_id.clone()));
        let confirmed = ServerMessage::ChatMessageConfirmed(ChatMessageConfirmed {
            chat_id: m.chat_id.clone(),
            message_id: msg.message_id.clone(),
            temp_id: msg.temp_id.clone(),
            new_messages_v: messages_v,
            new_last_edited_overall_timestamp: last_edited,
        });
        self.broadcast(Audience::All, &confirmed);
        // A message that carries its chat's history is a re-send (the answer to
        // `request_chat_history`): the other devices have it already.
        if msg.message_history.is_none() {
            let new = ServerMessage::NewChatMessage(NewChatMessage {
                chat_id: m.chat_id.clone(),
                message_id: msg.message_id.clone(),
                role: Role::User,
                sender_name: msg.sender_name.clone(),
                content: msg.content.clone(),
                created_at: msg.created_at,
                messages_v,
                last_edited_overall_timestamp: last_edited,
            });
            self.broadcast(Audience::AllExcept(self.device.conn_id), &new);
        }
        let message_id = msg.message_id.clone();
        let inbound = Inbound {
            message: msg,
            embeds: m.embeds,
            conn: self.device.conn_id,
            prior_messages: messages_v - 1,
            options,
        };
        let turns = &self.app.turn.turns;
        let admission = match turns
            .admit(user, &m.chat_id, inbound, &self.app.tasks.turns_shutdown)
            .await
        {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "cannot admit the message");
                let (code, text) = e.user_error();
                let mut p = ErrorPayload::new(code, text);
                p.chat_id = Some(m.chat_id);
                p.message_id = Some(message_id);
                return self.reply(ServerMessage::Error(p));
            }
        };
        match admission {
            Admission::Start(ticket) => {
                turn::spawn(self.app.turn.clone(), user.clone(), m.chat_id, *ticket)
            }
            Admission::Queued { active_task_id } => {
                self.reply(ServerMessage::MessageQueued(MessageQueued {
                    chat_id: m.chat_id,
                    user_message_id: message_id,
                    active_task_id,
                    message: "A response is in progress; this message will be answered next."
                        .into(),
                }))
            }
            Admission::QueueFull => {
                let mut p = ErrorPayload::new(
                    ErrorCode::Overloaded,
                    "too many messages are waiting in this chat",
                );
                p.chat_id = Some(m.chat_id);
                p.message_id = Some(message_id);
                self.reply(ServerMessage::Error(p));
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
        let cache = &app.turn.ai_cache;
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
                        self.error(
                            ErrorCode::CacheUnavailable,
                            "the cache is unavailable; try again shortly",
                        );
                        return None;
                    }
                }
            }
            stored = Some(versions.unwrap_or_default());
            app.owners.remember(user, chat);
        }
        let counted = match msg.message_history {
            Some(_) => cache.messages_v(owner, chat).await,
            None => cache.bump_messages_v(owner, chat, None).await,
        };
        if let Ok(Some(messages_v)) = counted {
            let last_edited = stored.map_or(0, |v| v.last_edited_overall_timestamp);
            return Some(Counted {
                messages_v,
                last_edited,
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
        })
    }

    /// Stops the owner's running skill.
    fn cancel_skill(&self, m: chatd_protocol::CancelSkill) {
        match self
            .app
            .turn
            .skills
            .cancels()
            .cancel(&self.device.user, &m.skill_task_id)
        {
            Ok(embed_id) => {
                self.reply(ServerMessage::SkillCancelRequested(
                    chatd_protocol::SkillCancelRequested {
                        skill_task_id: m.skill_task_id,
                        embed_id: Some(embed_id),
                        status: "cancellation_requested".into(),
                    },
                ));
            }
            // Not here: in cluster mode the node running it may be another one.
            Err(CancelRefused::NotFound) if self.app.turn.delivery.has_peers() => {
                self.app
                    .turn
                    .delivery
                    .cancel_skill_elsewhere(&self.device.user_hash, &m.skill_task_id);
                self.reply(ServerMessage::SkillCancelRequested(
                    chatd_protocol::SkillCancelRequested {
                        skill_task_id: m.skill_task_id,
                        embed_id: None,
                        status: "cancellation_requested".into(),
                    },
                ));
            }
            Err(CancelRefused::NotFound) => {
                self.error(ErrorCode::NotFound, "no running skill with this id")
            }
            Err(CancelRefused::Forbidden) => {
                self.error(ErrorCode::Forbidden, "this skill belongs to another user")
            }
        }
    }

    async fn cancel_ai_task(&self, m: CancelAiTask) {
        match self
            .app
            .turn
            .turns
            .cancel(&self.device.user, &m.task_id)
            .await
        {
            Ok(elsewhere) => {
                // Runs on another node: tell it now (it would also see it on renewal).
                if let Some(node) = elsewhere {
                    let control = crate::delivery::NodeControl::CancelTask {
                        task: m.task_id.clone(),
                    };
                    if let Err(e) = self.app.turn.delivery.control(&node, &control).await {
                        tracing::warn!(error = %e, "cannot reach the task's node; it stops on renewal");
                    }
                }
                self.reply(ServerMessage::AiTaskCancelRequested(
                    AiTaskCancelRequested {
                        task_id: m.task_id,
                        status: "revocation_sent".into(),
                    },
                ))
            }
            Err(CancelError::NotFound) => {
                self.error(ErrorCode::NotFound, "no running task with this id")
            }
            Err(CancelError::Forbidden) => {
                self.error(ErrorCode::Forbidden, "this task belongs to another user")
            }
            Err(CancelError::Unavailable) => self.error(
                ErrorCode::CacheUnavailable,
                "the task cannot be reached right now; try again shortly",
            ),
        }
    }
}

/// A user message's place in its chat.
struct Counted {
    /// The chat's `messages_v` with this message.
    messages_v: u64,
    /// The newest edit the store knows of (0 when it was not asked).
    last_edited: i64,
}

/// Shape checks of a re-sent history that need no state: roles and sizes.
fn check_history(history: &[chatd_protocol::HistoryMessage]) -> Result<(), String> {
    for h in history {
        if h.role == Role::System {
            return Err(format!(
                "message_history entry {} has role \"system\"; only user and assistant messages are accepted",
                h.message_id
            ));
        }
        if h.content.trim().is_empty() || h.content.len() > MAX_CONTENT_BYTES {
            return Err(format!(
                "message_history entry {} must have 1 to {MAX_CONTENT_BYTES} bytes of content",
                h.message_id
            ));
        }
    }
    Ok(())
}
