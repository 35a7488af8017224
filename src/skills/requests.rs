//! The requests of one tool call: parsed from the model's arguments (ids settled, required
//! fields present), run at most `skills.max_parallel_requests` at a time, each with one
//! retry for timeouts/5xx and rate limits waited out however long (the user sees `waiting`
//! and may cancel); each request's results are processed as soon as it ends.

use std::time::Duration;

use chatd_protocol::SkillStatus;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::Skill;
use super::executor::{self, ExecError};
pub use super::invocation::Request;
use super::invocation::{Ended, Invocation};
use super::results::Processed;

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

impl Invocation {
    /// Runs the requests (at most `max_parallel_requests` at once); each one's results are
    /// processed and shown as soon as it ends, with the progress in `skill_execution_status`.
    /// Returns them in request order, and whether the call was cancelled.
    pub(super) async fn run_requests(&self) -> (Vec<Processed>, bool) {
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
            let on_progress = |p: crate::skills::mcp::conn::Progress| {
                self.status(
                    SkillStatus::Processing,
                    json!({"embed_id": self.embed_id.as_str(), "progress": p.progress,
                           "total": p.total, "progress_message": p.message}),
                    None,
                );
            };
            let using = executor::Using {
                http: &self.deps.http,
                config,
                mcp: &self.deps.mcp,
                tasks: &self.deps.tasks,
                on_progress: &on_progress,
            };
            let deadline = match &self.skill.manifest.executor {
                super::manifest::Executor::Mcp {
                    timeout: Some(t), ..
                } => *t,
                _ => config.timeout,
            };
            let attempt = executor::execute(&self.skill.manifest.executor, &using, params);
            // Dropping the attempt (a cancel or the deadline) closes its HTTP request or
            // sends the MCP server `notifications/cancelled`.
            let result = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Ended::Cancelled,
                r = tokio::time::timeout(deadline, attempt) => {
                    r.unwrap_or(Err(ExecError::Timeout(deadline)))
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
}
