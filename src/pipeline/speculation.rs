//! The speculative main call. Preprocessing is a model round trip of its own that the main
//! call must wait for (it picks the model, the tools and the prompt, and may refuse). While it
//! runs, the main call it most likely leads to is already sent: the chat's previous plan, or,
//! for a chat this process has not answered yet, what preprocessing decides when the model
//! reports nothing notable. Once preprocessing is done, the early stream is kept only when
//! the decided plan is the same (so the request is byte-identical); otherwise, and on a
//! refusal or a cancel, it is dropped unread and the provider sees the hang-up. Nothing of it
//! reaches a client before preprocessing accepted the message: the harm gate stays in front.
//! The cost is a wasted main request per wrong guess (`chatd_speculative_main_calls_total`
//! counts both outcomes). `pipeline.speculative_main_call`: `"auto"` (the default) opens it
//! only for models whose requests cost nothing, `"on"` for every model, `"off"` never.

use std::future::Future;

use chatd_protocol::ChatId;
use dashmap::DashMap;
use futures_util::future::BoxFuture;

use super::context::MainPlan;
use super::models::Model;
use crate::llm::{LlmError, LlmStream};

/// Plans remembered per chat; a hint only, so the map is simply cleared when it grows past
/// its bound.
pub struct Predictions {
    last: DashMap<ChatId, MainPlan>,
    max_entries: usize,
}

impl Default for Predictions {
    fn default() -> Self {
        Self::with_capacity(50_000)
    }
}

impl Predictions {
    pub fn with_capacity(max_entries: usize) -> Self {
        Self {
            last: DashMap::new(),
            max_entries,
        }
    }

    /// The plan to open the early call with: the chat's last one, taking what this turn
    /// fixes already (a pinned model, the active focus mode), else `fallback()`.
    pub fn guess(
        &self,
        chat: &ChatId,
        pinned: Option<&Model>,
        active_focus: Option<&str>,
        fallback: impl FnOnce() -> MainPlan,
    ) -> MainPlan {
        let Some(mut plan) = self.last.get(chat).map(|p| p.clone()) else {
            return fallback();
        };
        if let Some(m) = pinned {
            plan.model = m.clone();
        }
        // The turn's focus mode is known before preprocessing (the chat's record).
        plan.focus_mode = active_focus.map(str::to_string);
        plan
    }

    pub fn remember(&self, chat: &ChatId, plan: MainPlan) {
        if self.last.len() >= self.max_entries && !self.last.contains_key(chat) {
            self.last.clear();
        }
        self.last.insert(chat.clone(), plan);
    }

    pub fn forget(&self, chat: &ChatId) {
        self.last.remove(chat);
    }
}

/// A main call opened ahead of time: still connecting, or connected (or failed).
pub enum Early<'a> {
    Pending(BoxFuture<'a, Result<LlmStream, LlmError>>),
    Ready(Result<LlmStream, LlmError>),
}

impl Early<'_> {
    /// The opened stream, once the provider answered.
    pub async fn opened(self) -> Result<LlmStream, LlmError> {
        match self {
            Early::Pending(f) => f.await,
            Early::Ready(r) => r,
        }
    }
}

/// Runs `main` to completion while driving `side` (opening the early call) alongside; returns
/// `main`'s output and the side call in whatever state it reached.
pub async fn alongside<'a, T>(
    main: impl Future<Output = T>,
    side: Option<BoxFuture<'a, Result<LlmStream, LlmError>>>,
) -> (T, Option<Early<'a>>) {
    let Some(mut side) = side else {
        return (main.await, None);
    };
    tokio::pin!(main);
    tokio::select! {
        biased;
        out = &mut main => (out, Some(Early::Pending(side))),
        opened = &mut side => (main.await, Some(Early::Ready(opened))),
    }
}
