//! A connection's session: rate limits, parsing, and exhaustive dispatch of every
//! [`ClientMessage`] with ownership checks. Bad input becomes a typed `error` frame and the
//! connection stays usable.

mod apps;
mod delete;
mod embeds;
mod focus;
mod key_check;
mod memories;
mod message;
mod ownership;
mod paging;
mod persist;
mod resume;
mod routine;
mod seen;
mod sync;
mod sync_worker;

use std::num::NonZeroU32;
use std::sync::Arc;

use chatd_protocol::{
    ActiveChatSetAck, AiTaskCancelRequested, CancelAiTask, ClientMessage, Empty, ErrorCode,
    ErrorPayload, ServerMessage, SetActiveChat, parse_client_message,
};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use self::sync_worker::SyncJob;
use crate::delivery::{Audience, Device};
use crate::metrics::TypeLabel;
use crate::skills::CancelRefused;
use crate::state::AppState;
use crate::turn::CancelError;

/// Longest user message accepted, in bytes.
pub(crate) const MAX_CONTENT_BYTES: usize = 256 * 1024;

/// One connection's message handling. Cloning shares it (the sync worker holds a clone).
#[derive(Clone)]
pub struct Session {
    app: Arc<AppState>,
    device: Arc<Device>,
    limiter: Arc<DefaultDirectRateLimiter>,
    /// Phased-sync requests waiting for this connection's sync worker (see `sync`).
    syncs: Arc<std::sync::OnceLock<tokio::sync::mpsc::Sender<SyncJob>>>,
    /// The session token's `exp` (unix seconds); `refresh_token` moves it.
    token_expires_at: Arc<std::sync::atomic::AtomicU64>,
}

pub fn quota(rate: u32, burst: u32) -> Quota {
    let rate = NonZeroU32::new(rate).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
    Quota::per_second(rate).allow_burst(burst)
}

impl Session {
    pub fn new(app: Arc<AppState>, device: Arc<Device>, token_expires_at: u64) -> Self {
        let limits = &app.config.limits;
        let limiter = RateLimiter::direct(quota(limits.connection_rate, limits.connection_burst));
        Self {
            app,
            device,
            limiter: Arc::new(limiter),
            syncs: Arc::default(),
            token_expires_at: Arc::new(token_expires_at.into()),
        }
    }

    /// How long the session token has left (zero once expired).
    pub fn token_time_left(&self) -> std::time::Duration {
        let exp = self
            .token_expires_at
            .load(std::sync::atomic::Ordering::Acquire);
        let now_ms = u64::try_from(crate::clock::unix_millis()).unwrap_or(0);
        std::time::Duration::from_millis(exp.saturating_mul(1000).saturating_sub(now_ms))
    }

    /// A fresh token for this socket: it must be valid and the same user's.
    async fn refresh_token(&self, m: chatd_protocol::RefreshToken) {
        match self.app.auth.verify(&m.token).await {
            Ok((user, exp)) if user == self.device.user => {
                self.token_expires_at
                    .fetch_max(exp, std::sync::atomic::Ordering::AcqRel);
                self.reply(ServerMessage::TokenRefreshed(
                    chatd_protocol::TokenRefreshed { expires_at: exp },
                ));
            }
            Ok(_) => self.error(
                ErrorCode::InvalidToken,
                "the token is another user's; a socket keeps its user",
            ),
            Err(e) => self.error(ErrorCode::InvalidToken, e.to_string()),
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
                // The next login's sync opens this chat first (on any device); remembered
                // before the acknowledgement, so a sync after it sees it.
                if let Some(c) = &chat
                    && !self.device.shows(c)
                    && let Err(e) = self.app.store.set_last_opened(&self.device.user, c).await
                {
                    tracing::warn!(error = %e, "cannot remember the chat last opened");
                }
                self.set_active_chat(m);
                if let Some(chat) = chat {
                    // A focus mode started before this device connected.
                    self.tell_active_focus(chat.clone()).await;
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
            ClientMessage::KeyCheck(m) => self.key_check(m).await,
            ClientMessage::PhasedSyncRequest(m) => self.queue_sync(SyncJob::Phased(*m)),
            ClientMessage::LoadMoreChats(m) => self.queue_sync(SyncJob::LoadMore(m)),
            ClientMessage::GetChatMessages(m) => self.queue_sync(SyncJob::Messages(m)),
            ClientMessage::RequestChatContentBatch(m) => self.queue_sync(SyncJob::Batch(m)),
            ClientMessage::ResumeAiTask(m) => self.resume_ai_task(m).await,
            ClientMessage::RefreshToken(m) => self.refresh_token(m).await,
            ClientMessage::ChatFocusModeActivate(m) => self.focus_mode_activate(m).await,
            ClientMessage::ChatFocusModeDeactivate(m) => self.focus_mode_deactivate(m).await,
            ClientMessage::AppSettingsMemoriesConfirmed(m) => {
                self.app_settings_memories_confirmed(*m).await
            }
            ClientMessage::AppSettingsMemoriesProposalResult(m) => {
                self.app_settings_memories_proposal_result(m).await
            }
            ClientMessage::RejectSettingsMemorySuggestion(m) => {
                self.reject_settings_memory_suggestion(m).await
            }
            ClientMessage::CancelRoutine(m) => self.cancel_routine(m).await,
            ClientMessage::SetAppPreferences(m) => self.set_app_preferences(m).await,
        }
    }

    fn set_active_chat(&self, m: SetActiveChat) {
        self.device.set_active_chat(m.chat_id.clone());
        self.reply(ServerMessage::ActiveChatSetAck(ActiveChatSetAck {
            chat_id: m.chat_id,
        }));
    }

    /// Stops the owner's running skill.
    fn cancel_skill(&self, m: chatd_protocol::CancelSkill) {
        match self
            .app
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
            Err(CancelRefused::NotFound) if self.app.delivery.has_peers() => {
                self.app
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
        match self.app.turns.cancel(&self.device.user, &m.task_id).await {
            Ok(elsewhere) => {
                // Runs on another node: tell it now (it would also see it on renewal).
                if let Some(node) = elsewhere {
                    let control = crate::delivery::NodeControl::CancelTask {
                        task: m.task_id.clone(),
                    };
                    if let Err(e) = self.app.delivery.control(&node, &control).await {
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
