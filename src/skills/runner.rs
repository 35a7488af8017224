//! One tool call of one skill: its placeholder embed and `skill_execution_status` on each
//! change; a call that outlives `skills.long_wait` (waiting on a rate limit or working)
//! releases the answer and its results follow as their own message; cancellation. The
//! call's state is [`Invocation`] (`invocation.rs`, re-exported here); its requests are run
//! in `requests.rs`, their results processed in `results.rs`.

use std::sync::Arc;
use std::time::Duration;

use chatd_protocol::{EmbedId, SkillStatus};
use serde_json::{Value, json};
use tokio::sync::oneshot;

pub use super::invocation::Invocation;
use crate::crypto::UserHash;
use crate::pipeline::tools::toon;
use crate::pipeline::{EmbedEvent, SkillEvent, TurnEvent};

/// Why a call's results will come after the answer.
enum Later {
    /// A rate limit holds a request for about this long.
    RateLimited(Duration),
    /// The call has been running longer than `skills.long_wait`.
    Slow,
}

impl Invocation {
    pub(super) fn status(&self, status: SkillStatus, preview: Value, error: Option<String>) {
        self.sink.emit(
            &self.ctx,
            TurnEvent::Skill(SkillEvent {
                skill_task_id: self.skill_task_id.clone(),
                app_id: self.skill.app_id.clone(),
                skill_id: self.skill.skill_id.clone(),
                status,
                preview,
                error,
            }),
        );
    }

    /// Seals the embed into the AI cache (under the chat) and sends it to the devices.
    pub(super) async fn embed(&self, e: EmbedEvent) {
        self.store(&e).await;
        self.sink.emit(&self.ctx, TurnEvent::Embed(e));
    }

    /// Seals the embed into the AI cache under the chat.
    pub(super) async fn store(&self, e: &EmbedEvent) {
        let owner = UserHash::of(&self.ctx.user);
        let cached = chatd_protocol::ClientEmbed {
            embed_id: e.embed_id.clone(),
            embed_type: e.embed_type.clone(),
            content: e.content.clone(),
            status: Some(e.status.as_str().to_string()),
            version_number: e.version_number,
            content_hash: None,
        };
        if let Err(err) = self
            .deps
            .cache
            .put_embed(&owner, &self.ctx.chat_id, &cached)
            .await
        {
            tracing::warn!(error = %err, "could not cache a skill embed");
        }
    }

    pub(super) fn embed_event(
        &self,
        embed_id: EmbedId,
        embed_type: &str,
        content: String,
        status: SkillStatus,
        version: u64,
    ) -> EmbedEvent {
        EmbedEvent {
            content_hash: crate::cache::ai::content_hash(embed_type, &content),
            embed_id,
            embed_type: embed_type.to_string(),
            content,
            status,
            skill_task_id: Some(self.skill_task_id.clone()),
            app_id: self.skill.app_id.clone(),
            skill_id: self.skill.skill_id.clone(),
            embed_ids: Vec::new(),
            parent_embed_id: None,
            version_number: version,
            injection_flagged: false,
        }
    }

    /// The placeholder embed (status `processing`), sent before the call runs.
    pub fn placeholder(&self) -> EmbedEvent {
        let content = toon(&json!({
            "app_id": self.skill.app_id,
            "skill_id": self.skill.skill_id,
            "status": "processing",
            "skill_task_id": self.skill_task_id.as_str(),
            "request_count": self.requests.len(),
            "requests": self.requests.iter().map(|r| &r.params).collect::<Vec<_>>(),
        }));
        self.embed_event(
            self.embed_id.clone(),
            "app_skill_use",
            content,
            SkillStatus::Processing,
            1,
        )
    }

    /// The reference block streamed into the answer where the embed belongs.
    pub fn reference(&self) -> String {
        let mut block = json!({
            "type": "app_skill_use",
            "embed_id": self.embed_id.as_str(),
            "app_id": self.skill.app_id,
            "skill_id": self.skill.skill_id,
        });
        if let Some(q) = self.requests.first().and_then(|r| r.params.get("query")) {
            block["query"] = q.clone();
        }
        format!("```json\n{block}\n```\n\n")
    }

    pub fn announce(&self) {
        self.status(
            SkillStatus::Processing,
            json!({"embed_id": self.embed_id.as_str(), "request_count": self.requests.len()}),
            None,
        );
    }

    /// Runs the call; returns the model's tool message. When a rate limit makes a request
    /// wait longer than `skills.long_wait`, the model is told the results will follow and
    /// the call goes on in the background; its results then arrive as an automatic
    /// follow-up assistant message.
    pub async fn run(self) -> String {
        // The placeholder was sent when the call was prepared; now it is cached too.
        self.store(&self.placeholder()).await;
        let (tx, rx) = oneshot::channel();
        if let Ok(mut slot) = self.long_wait.lock() {
            *slot = Some(tx);
        }
        let this = Arc::new(self);
        let mut worker = {
            let inner = this.clone();
            this.deps.tasks.spawn(async move { inner.complete().await })
        };
        let later = tokio::select! {
            done = &mut worker => {
                return done.unwrap_or_else(|e| {
                    tracing::error!(error = %e, "skill task failed");
                    toon(&json!({"status": "error", "error": "the skill failed inside chatd"}))
                });
            }
            Ok(wait) = rx => Later::RateLimited(wait),
            () = tokio::time::sleep(this.deps.config.long_wait) => Later::Slow,
        };
        let follow = this.clone();
        this.deps.tasks.spawn(async move {
            if let Ok(message) = worker.await {
                follow.follow_up(&message).await;
            }
        });
        let why = match later {
            Later::RateLimited(wait) => format!(
                "The {} provider is rate-limited for about {} s.",
                this.skill.full_id,
                wait.as_secs().max(1)
            ),
            Later::Slow => format!("The {} skill is still working.", this.skill.full_id),
        };
        toon(&json!({
            "status": "pending",
            "message": format!(
                "{why} Tell the user the results will follow in a separate message; do not invent them."
            ),
            "app_id": this.skill.app_id,
            "skill_id": this.skill.skill_id,
        }))
    }

    async fn complete(&self) -> String {
        let (processed, cancelled) = self.run_requests().await;
        self.deps.cancels.finish(&self.skill_task_id);
        if cancelled || self.cancelled().await {
            return self.cancelled_result().await;
        }
        self.finish(processed).await
    }

    /// The automatic follow-up assistant message for results that came after the turn:
    /// the turn's writer delivers it as a message of its own (and caches it).
    async fn follow_up(&self, model_message: &str) {
        if self.cancel.is_cancelled() {
            return;
        }
        let summary = toon_format::decode_default::<Value>(model_message)
            .ok()
            .and_then(|v| v["summary"].as_str().map(str::to_string));
        let text = format!(
            "Done, here are the results of {}.\n\n{}{}",
            self.skill.full_id,
            self.reference(),
            summary.unwrap_or_default()
        );
        self.sink.emit(
            &self.ctx,
            TurnEvent::FollowUp {
                text: Arc::from(text.trim_end()),
            },
        );
    }

    /// Whether the call was cancelled (its turn, or `cancel_skill`).
    pub(super) async fn cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    async fn cancelled_result(&self) -> String {
        let content = toon(&json!({
            "app_id": self.skill.app_id, "skill_id": self.skill.skill_id,
            "status": "cancelled", "skill_task_id": self.skill_task_id.as_str(),
        }));
        let e = self.embed_event(
            self.embed_id.clone(),
            "app_skill_use",
            content,
            SkillStatus::Cancelled,
            2,
        );
        self.embed(e).await;
        self.status(
            SkillStatus::Cancelled,
            json!({"embed_id": self.embed_id.as_str(), "cancelled_by_user": true}),
            None,
        );
        toon(&json!({
            "status": "cancelled",
            "message": format!("The {} skill was cancelled by the user. Continue without its results.", self.skill.full_id),
            "app_id": self.skill.app_id,
            "skill_id": self.skill.skill_id,
        }))
    }
}
