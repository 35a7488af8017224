//! One tool call of one skill: its requests (ids validated, at most
//! `skills.max_parallel_requests` at a time), each with one retry for timeouts/5xx, none for
//! 4xx, and rate limits that wait for their reset however long it is (the user sees
//! `waiting` and may cancel); a call that outlives `skills.long_wait` (waiting or working)
//! releases the answer and its results follow as their own message; the placeholder embed
//! and `skill_execution_status` on each change; cancellation. What happens to the results
//! is in `results.rs`.

use std::sync::Arc;
use std::time::Duration;

use chatd_protocol::{EmbedId, SkillStatus, SkillTaskId};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, oneshot};
use tokio_util::sync::CancellationToken;

use super::executor::{self, ExecError};
use super::results::Processed;
use super::{Deps, Skill};
use crate::crypto::UserHash;
use crate::pipeline::tools::toon;
use crate::pipeline::{EmbedEvent, SkillEvent, TurnContext, TurnEvent, TurnSink};

/// One request of a call, its id settled.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: Value,
    /// The parameters, without `id`.
    pub params: Value,
}

/// Reads `{"requests": [...]}` (or one bare request object); a single request may omit its
/// id (it becomes 1); several need unique ids. Every request needs the schema's required
/// fields. The error text goes back to the model.
pub fn parse_requests(skill: &Skill, arguments: &str) -> Result<Vec<Request>, String> {
    let args: Value =
        serde_json::from_str(arguments).map_err(|e| format!("the arguments are not JSON: {e}"))?;
    let items = match args.get("requests") {
        Some(Value::Array(items)) => items.clone(),
        Some(_) => return Err("`requests` must be an array".into()),
        None if args.is_object() => vec![args],
        None => return Err("expected {\"requests\": [{...}]}".into()),
    };
    if items.is_empty() {
        return Err("`requests` is empty".into());
    }
    let several = items.len() > 1;
    let mut seen = Vec::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let Value::Object(mut params) = item else {
            return Err(format!("request {} is not an object", i + 1));
        };
        let id = match params.remove("id") {
            None if several => {
                return Err(format!(
                    "request {} has no `id`: several requests each need a unique id",
                    i + 1
                ));
            }
            None => json!(1),
            Some(id @ (Value::Number(_) | Value::String(_))) => id,
            Some(_) => {
                return Err(format!(
                    "request {}: `id` must be a number or a string",
                    i + 1
                ));
            }
        };
        if seen.contains(&id) {
            return Err(format!("request id {id} is used twice; ids must be unique"));
        }
        for field in &skill.manifest.input.required {
            if params.get(field).is_none_or(Value::is_null) {
                return Err(format!("request {id}: `{field}` is required"));
            }
        }
        seen.push(id.clone());
        out.push(Request {
            id,
            params: Value::Object(params),
        });
    }
    Ok(out)
}

/// How one request ended.
pub(super) enum Ended {
    Results(executor::Output),
    Failed(String),
    Cancelled,
}

/// Everything one invocation needs, owned (it runs as a `'static` future).
pub struct Invocation {
    pub skill: Arc<Skill>,
    pub deps: Arc<Deps>,
    /// The turn's writer: every event of this call goes through it.
    pub sink: Arc<dyn TurnSink>,
    pub ctx: TurnContext,
    pub skill_task_id: SkillTaskId,
    pub embed_id: EmbedId,
    pub requests: Vec<Request>,
    pub cancel: CancellationToken,
    /// Fired (once) when a rate-limit wait exceeds `skills.long_wait`.
    pub long_wait: std::sync::Mutex<Option<oneshot::Sender<Duration>>>,
}

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

    /// Runs the requests (at most `max_parallel_requests` at once); each one's results are
    /// processed and shown as soon as it ends, with the progress in `skill_execution_status`.
    /// Returns them in request order, and whether the call was cancelled.
    async fn run_requests(&self) -> (Vec<Processed>, bool) {
        let gate = Semaphore::new(self.deps.config.max_parallel_requests);
        let mut runs: FuturesUnordered<_> = self
            .requests
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let gate = &gate;
                async move {
                    let end = match gate.acquire().await {
                        Ok(_permit) => self.run_one(&r.params).await,
                        Err(_) => Ended::Failed("the runner is shutting down".into()),
                    };
                    let cancelled = matches!(end, Ended::Cancelled);
                    (i, cancelled, self.process(r.id.clone(), end).await)
                }
            })
            .collect();
        let total = self.requests.len();
        let mut slots: Vec<Option<Processed>> = (0..total).map(|_| None).collect();
        let mut cancelled = false;
        let mut completed = 0;
        while let Some((i, was_cancelled, processed)) = runs.next().await {
            cancelled |= was_cancelled;
            completed += 1;
            if completed < total && !cancelled {
                self.status(
                    SkillStatus::Processing,
                    json!({"embed_id": self.embed_id.as_str(), "request_count": total,
                           "completed_requests": completed}),
                    None,
                );
            }
            if let Some(slot) = slots.get_mut(i) {
                *slot = Some(processed);
            }
        }
        (slots.into_iter().flatten().collect(), cancelled)
    }

    /// Whether the call was cancelled (its turn, or `cancel_skill`).
    async fn cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// One request: checked for cancellation before the start, before a retry and after
    /// the end; one retry for timeouts/5xx; rate limits wait for their reset, however long
    /// (never rejected; the user may cancel).
    async fn run_one(&self, params: &Value) -> Ended {
        let config = &self.deps.config;
        let mut retried = false;
        loop {
            if self.cancelled().await {
                return Ended::Cancelled;
            }
            if let Some(limiter) = &self.skill.limiter
                && let Err(not_until) = limiter.check()
            {
                let wait = not_until.wait_time_from(governor::clock::Clock::now(
                    &governor::clock::DefaultClock::default(),
                ));
                if let Some(end) = self.wait(wait).await {
                    return end;
                }
                continue;
            }
            let attempt = executor::execute(
                &self.skill.manifest.executor,
                &self.deps.http,
                config,
                params,
            );
            let result = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Ended::Cancelled,
                r = tokio::time::timeout(config.timeout, attempt) => {
                    r.unwrap_or(Err(ExecError::Timeout(config.timeout)))
                }
            };
            match result {
                Ok(results) => {
                    if self.cancelled().await {
                        return Ended::Cancelled;
                    }
                    return Ended::Results(results);
                }
                Err(e) => {
                    if let Some(wait) = e.rate_limited() {
                        if let Some(end) = self.wait(wait).await {
                            return end;
                        }
                        continue;
                    }
                    if e.is_retryable() && !retried {
                        retried = true;
                        tracing::info!(skill = %self.skill.full_id, error = %e, "retrying a skill request once");
                        tokio::select! {
                            _ = self.cancel.cancelled() => return Ended::Cancelled,
                            () = tokio::time::sleep(config.retry_delay) => {}
                        }
                        continue;
                    }
                    return Ended::Failed(e.to_string());
                }
            }
        }
    }

    /// Waits out a rate limit (the user sees `waiting` and when it ends); `Some` ends the
    /// request (only a cancel does). A wait over `skills.long_wait` releases the answer at
    /// once (see [`Invocation::run`]).
    async fn wait(&self, wait: Duration) -> Option<Ended> {
        if wait > self.deps.config.long_wait
            && let Some(tx) = self.long_wait.lock().ok().and_then(|mut s| s.take())
        {
            let _ = tx.send(wait);
        }
        let until =
            crate::clock::unix_now().saturating_add(wait.as_secs().try_into().unwrap_or(i64::MAX));
        self.status(
            SkillStatus::Waiting,
            json!({
                "embed_id": self.embed_id.as_str(),
                "retry_after_seconds": wait.as_secs_f64(),
                "waiting_until": until,
            }),
            None,
        );
        tokio::select! {
            _ = self.cancel.cancelled() => Some(Ended::Cancelled),
            () = tokio::time::sleep(wait) => None,
        }
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

/// However an invocation ends (also dropped unrun when its turn is cancelled), it leaves the
/// registry of running skills.
impl Drop for Invocation {
    fn drop(&mut self) {
        self.deps.cancels.finish(&self.skill_task_id);
    }
}
