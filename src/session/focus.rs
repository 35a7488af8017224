//! `chat_focus_mode_activate` and `chat_focus_mode_deactivate`: the user starts or ends a
//! chat's focus mode (see [`crate::focus`]); every device hears of it. An unknown focus
//! mode or another user's chat is refused with nothing changed.

use chatd_protocol::{
    ChatFocusModeActivate, ChatFocusModeDeactivate, ChatId, ErrorCode, ErrorPayload,
    FocusModeActivated, FocusModeDeactivated, ServerMessage,
};

use super::Session;
use crate::cache::ai::{CacheFault, FocusRecord};
use crate::delivery::Audience;

impl Session {
    pub(super) async fn focus_mode_activate(&self, m: ChatFocusModeActivate) {
        if !self.stored_chat_allowed(&m.chat_id, None).await {
            return;
        }
        let Some(mode) = self.app.focus.get(&m.focus_id).cloned() else {
            return self.unknown_focus(&m.chat_id, &m.focus_id);
        };
        let record = FocusRecord {
            active: Some(mode.id.clone()),
        };
        if let Err(e) = self
            .app
            .ai_cache
            .set_focus(&self.device.user_hash, &m.chat_id, &record)
            .await
        {
            return self.focus_fault(&m.chat_id, &e);
        }
        self.broadcast(
            Audience::All,
            &ServerMessage::FocusModeActivated(FocusModeActivated {
                chat_id: m.chat_id,
                focus_id: mode.id.clone(),
            }),
        );
    }

    pub(super) async fn focus_mode_deactivate(&self, m: ChatFocusModeDeactivate) {
        if !self.stored_chat_allowed(&m.chat_id, None).await {
            return;
        }
        if let Some(id) = &m.focus_id
            && self.app.focus.get(id).is_none()
        {
            return self.unknown_focus(&m.chat_id, id);
        }
        let cache = &self.app.ai_cache;
        let user = &self.device.user_hash;
        let active = match cache.focus(user, &m.chat_id).await {
            Ok(record) => record.and_then(|r| r.active),
            Err(e) => return self.focus_fault(&m.chat_id, &e),
        };
        if m.focus_id.is_some() && m.focus_id != active {
            let mut p = ErrorPayload::new(
                ErrorCode::NotFound,
                "this focus mode is not the chat's active one",
            );
            p.chat_id = Some(m.chat_id);
            return self.reply(ServerMessage::Error(p));
        }
        if let Err(e) = cache
            .set_focus(user, &m.chat_id, &FocusRecord { active: None })
            .await
        {
            return self.focus_fault(&m.chat_id, &e);
        }
        self.broadcast(
            Audience::All,
            &ServerMessage::FocusModeDeactivated(FocusModeDeactivated {
                chat_id: m.chat_id,
                focus_id: active,
            }),
        );
    }

    /// The chat's active focus mode, to this device only (nothing when none, or when the
    /// cache cannot say: the device hears of the next change).
    pub(super) async fn tell_active_focus(&self, chat: ChatId) {
        match self.app.ai_cache.focus(&self.device.user_hash, &chat).await {
            Ok(Some(FocusRecord {
                active: Some(focus_id),
            })) => self.reply(ServerMessage::FocusModeActivated(FocusModeActivated {
                chat_id: chat,
                focus_id,
            })),
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "a chat's focus mode is not known now"),
        }
    }

    fn unknown_focus(&self, chat: &ChatId, id: &str) {
        let mut p = ErrorPayload::new(
            ErrorCode::UnknownFocusMode,
            "no app declares this focus mode",
        );
        p.details = Some(format!(
            "`{id}` is not one of: {}",
            self.app
                .focus
                .all()
                .iter()
                .map(|f| f.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        p.chat_id = Some(chat.clone());
        self.reply(ServerMessage::Error(p));
    }

    fn focus_fault(&self, chat: &ChatId, e: &CacheFault) {
        tracing::warn!(error = %e, "cannot record a chat's focus mode");
        self.cache_fault(e, Some(chat));
    }
}
