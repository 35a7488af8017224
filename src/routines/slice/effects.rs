//! The effects a slice runs for real (not replayed): `emit` (a `message` also joins the
//! chat's history), skill and model calls, drive reads and writes; each bounded by the
//! slice's cancellation and time.

use std::sync::atomic::Ordering;
use std::time::Instant;

use chatd_protocol::{MessageId, Role, RoutineErrorCode};
use futures_util::StreamExt;
use serde_json::{Value, json};

use super::{EmitKind, Slice, Stop, failed};
use crate::cache::ai::CachedMessage;
use crate::llm::{LlmEvent, LlmMessage, LlmRequest, ToolCall, ToolDef};
use crate::pipeline::tools::ToolRunner;
use crate::pipeline::{RoutineEvent, TurnEvent};
use crate::routines::journal::EffectKind;

impl Slice {
    /// Runs a new effect, bounded by cancellation and the slice's time.
    pub(super) async fn perform(&self, kind: EffectKind, request: &Value) -> Result<Value, Stop> {
        let work = async {
            let run = self.run_id();
            if kind != EffectKind::Emit
                && self
                    .inner
                    .store
                    .cancel_requested(&self.owner, &run)
                    .await
                    .unwrap_or(false)
            {
                return Err(Stop::Cancelled);
            }
            match kind {
                EffectKind::Emit => {
                    let kind = request["kind"]
                        .as_str()
                        .and_then(EmitKind::parse)
                        .unwrap_or(EmitKind::Status);
                    let text = request["text"].as_str().unwrap_or_default().to_string();
                    // The effect's position names the message: the same on every replay.
                    let position = self.cursor.load(Ordering::SeqCst).saturating_sub(1);
                    let message_id = MessageId::parse(format!("{}-{position}", run.as_str()))
                        .unwrap_or_else(|_| MessageId::random());
                    if kind == EmitKind::Message {
                        self.cache_message(&message_id, &text).await;
                    }
                    self.sink.emit(
                        &self.ctx,
                        TurnEvent::Routine(RoutineEvent {
                            run_id: run,
                            kind: kind.event(text, message_id),
                        }),
                    );
                    Ok(Value::Null)
                }
                EffectKind::Skill => self.call_skill(request).await,
                EffectKind::Model => self.call_model(request).await,
                EffectKind::DriveGet => self
                    .inner
                    .store
                    .drive_get(
                        &self.owner,
                        request["app"].as_str().unwrap_or_default(),
                        request["key"].as_str().unwrap_or_default(),
                    )
                    .await
                    .map(|v| v.unwrap_or(Value::Null))
                    .map_err(|_| drive_down()),
                EffectKind::DriveSet => self
                    .inner
                    .store
                    .drive_put(
                        &self.owner,
                        request["app"].as_str().unwrap_or_default(),
                        request["key"].as_str().unwrap_or_default(),
                        &request["value"],
                        self.inner.config.drive_ttl,
                    )
                    .await
                    .map(|()| Value::Null)
                    .map_err(|_| drive_down()),
                EffectKind::Ask | EffectKind::Run => Ok(Value::Null),
            }
        };
        let deadline = tokio::time::Instant::from_std(self.deadline);
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Err(Stop::Cancelled),
            _ = tokio::time::sleep_until(deadline) => Err(self.time_out()),
            // A cancel landing while `work` is polled can end the work itself (a skill
            // answers "cancelled" to the model): that is still a cancelled run.
            r = work => if self.cancel.is_cancelled() { Err(Stop::Cancelled) } else { r },
        }
    }

    /// A `message` is the assistant's message of the chat: counted and cached like an
    /// answer, so the next turn's model sees it (the client stores it under the same id).
    async fn cache_message(&self, message_id: &MessageId, text: &str) {
        let cache = &self.inner.ai_cache;
        let chat = &self.ctx.chat_id;
        let entry = CachedMessage {
            message_id: message_id.clone(),
            role: Role::Assistant,
            content: text.to_string(),
            created_at: crate::clock::unix_now(),
            category: None,
            model_name: None,
            token_count: Some(crate::pipeline::tokens::count_one(text).await),
            replaces_through: None,
        };
        if let Err(e) = cache.bump_messages_v(&self.owner, chat, None).await {
            tracing::warn!(error = %e, "could not count a routine message");
        }
        if let Err(e) = cache.append(&self.owner, chat, &[entry]).await {
            tracing::warn!(error = %e, "could not cache a routine message");
        }
    }

    /// A skill call, with the skill's own sanitisation, contract and embeds; the result is
    /// what the model would see.
    async fn call_skill(&self, request: &Value) -> Result<Value, Stop> {
        let name = request["skill"].as_str().unwrap_or_default().to_string();
        let skills = &self.inner.skills;
        let Some(info) = skills.skills().into_iter().find(|s| s.id == name) else {
            return Err(failed(
                RoutineErrorCode::ScriptError,
                format!("no skill `{name}`"),
            ));
        };
        // The rule preprocessing applies to the model's tools holds for scripts too.
        if let Some(app) = info.requires_account
            && !self.ctx.connected_accounts.contains(&app)
        {
            return Err(failed(
                RoutineErrorCode::AccountRequired,
                format!("skill `{name}` needs the user's connected {app} account"),
            ));
        }
        let mut requests = match &request["args"] {
            Value::Array(list) => list.clone(),
            other => vec![other.clone()],
        };
        for (i, r) in requests.iter_mut().enumerate() {
            if let Some(obj) = r.as_object_mut() {
                obj.entry("id").or_insert(json!(i + 1));
            }
        }
        let position = self.cursor.load(Ordering::SeqCst);
        let call = ToolCall {
            id: format!("routine-{}-{position}", self.run_id().as_str()),
            name,
            arguments: json!({ "requests": requests }).to_string(),
        };
        let prepared = skills.prepare(call, &self.ctx, &self.sink, self.cancel.child_token());
        let message = prepared.run.await;
        Ok(toon_format::decode_default::<Value>(&message).unwrap_or(Value::String(message)))
    }

    /// A model call with the routine's model: text, or the arguments of a forced function
    /// whose parameters are `schema`.
    async fn call_model(&self, request: &Value) -> Result<Value, Stop> {
        let model = self
            .current()
            .and_then(|r| r.manifest.model.clone())
            .and_then(|id| self.inner.models.get(&id).cloned())
            .unwrap_or_else(|| self.inner.main_model.clone());
        // The chat's personal data stays behind placeholders here too.
        let client = crate::privacy::through(&model.client, self.ctx.privacy.as_ref());
        let prompt = request["prompt"].as_str().unwrap_or_default().to_string();
        let mut llm = LlmRequest::chat(model.spec.name.clone(), vec![LlmMessage::User(prompt)]);
        let model_failed = |e: String| failed(RoutineErrorCode::ModelFailed, e);
        if let Some(schema) = request.get("schema").filter(|s| s.is_object()) {
            llm.tools = vec![ToolDef {
                name: "routine_output".into(),
                description: "Return the result in this shape.".into(),
                parameters: schema.clone().into(),
            }];
            let left = self.deadline.saturating_duration_since(Instant::now());
            return crate::pipeline::function_call::call_function(
                client.as_ref(),
                llm,
                left,
                &self.cancel,
            )
            .await
            .map(|c| c.arguments)
            .map_err(|e| model_failed(e.to_string()));
        }
        let mut stream = client
            .stream(llm)
            .await
            .map_err(|e| model_failed(e.to_string()))?;
        let mut text = String::new();
        while let Some(event) = stream.next().await {
            match event.map_err(|e| model_failed(e.to_string()))? {
                LlmEvent::TextDelta(t) => text.push_str(&t),
                LlmEvent::Done { .. } => break,
                _ => {}
            }
        }
        Ok(Value::String(text))
    }
}

fn drive_down() -> Stop {
    failed(
        RoutineErrorCode::JournalUnavailable,
        "the drive cannot be reached; try again shortly",
    )
}
