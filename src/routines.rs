//! Routines: procedures an app runs over several messages. A routine (`app_id.name`, a
//! Rhai script next to the app's manifest, see [`catalog`]) is offered to the main model
//! as a tool ([`tools`]). Its body gets a run context ([`slice`]): `ctx`, its frame's
//! `state`, `emit`, `ask_user`, `run` (a sub-routine in a frame of its own), `skill`,
//! `model`, `drive_get`/`drive_set`. A run is durable ([`journal`], [`store`]): every
//! effect is journaled, sealed, in the cache backend; `ask_user` pauses the run, and the
//! user's next message in the chat resumes it on whichever node receives it, replaying
//! the script against the journal without repeating an effect. Only one run per chat
//! waits for the user at a time; while one waits, every message of the chat is its answer
//! (the user ends a run with `cancel_routine`).

mod cancel;
pub mod catalog;
mod emit;
mod engine;
pub mod journal;
mod sandbox;
pub mod slice;
mod state;
pub mod store;
mod tools;

use std::collections::HashMap;
use std::sync::Arc;

use chatd_protocol::{ChatId, RoutineErrorCode, RoutineOutcome, RunId};
use dashmap::DashMap;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::cache::ai::AiCache;
use crate::config::RoutinesConfig;
use crate::crypto::UserHash;
use crate::pipeline::models::{Model, Models};
use crate::pipeline::{RoutineEvent, RoutineEventKind, TurnContext, TurnEvent, TurnSink};
use crate::skills::Skills;
pub use cancel::Cancelled;
pub use catalog::{Catalog, Routine, RoutinesError};
use journal::{EffectKind, Entry, RunRecord, RunStatus};
use slice::{Slice, SliceEnd, Stop};
use store::RunStore;

/// The routines of every app and their runs. Cheap to clone.
#[derive(Clone)]
pub struct Routines {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    catalog: Catalog,
    store: RunStore,
    /// Where a run's `message`s join the chat's history.
    ai_cache: AiCache,
    config: RoutinesConfig,
    skills: Arc<Skills>,
    main_model: Model,
    models: HashMap<String, Model>,
    /// Slices running on this node: who owns each and how to stop it.
    running: DashMap<RunId, (UserHash, CancellationToken)>,
}

impl Routines {
    pub fn new(
        config: &RoutinesConfig,
        catalog: Catalog,
        store: RunStore,
        ai_cache: AiCache,
        skills: Arc<Skills>,
        models: &Models,
    ) -> Routines {
        let picked = catalog
            .all()
            .iter()
            .filter_map(|r| r.manifest.model.clone())
            .filter_map(|id| models.get(&id).map(|m| (id, m)))
            .collect();
        Routines {
            inner: Arc::new(Inner {
                catalog,
                store,
                ai_cache,
                config: config.clone(),
                skills,
                main_model: models.main(),
                models: picked,
                running: DashMap::new(),
            }),
        }
    }

    pub fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    pub fn store(&self) -> &RunStore {
        &self.inner.store
    }

    /// Starts a run of `routine` (the model called its tool); returns the model's tool
    /// message: its result, its question, or its error.
    pub async fn start(
        &self,
        routine: Arc<Routine>,
        arguments: &str,
        ctx: TurnContext,
        sink: Arc<dyn TurnSink>,
        cancel: CancellationToken,
    ) -> String {
        let tool_error = |error: String| {
            crate::pipeline::tools::toon(&json!({"status": "error", "error": error}))
        };
        let args: Value = match serde_json::from_str(arguments) {
            Ok(v @ Value::Object(_)) => v,
            _ => {
                return tool_error(format!(
                    "the arguments of {} must be an object",
                    routine.tool
                ));
            }
        };
        if let Err(reason) = crate::schema::validate(&routine.manifest.arguments, &args) {
            return tool_error(format!("invalid arguments for {}: {reason}", routine.tool));
        }
        let owner = UserHash::of(&ctx.user);
        if let Ok(Some(_)) = self.inner.store.waiting(&owner, &ctx.chat_id).await {
            return tool_error(
                "another routine waits for the user's answer in this chat; the user must answer or cancel it first".into(),
            );
        }
        let record = RunRecord {
            run_id: RunId::random(),
            chat_id: ctx.chat_id.clone(),
            routine: routine.full_id.clone(),
            args,
            status: RunStatus::Running,
            journal: Vec::new(),
            question: None,
            frames: Vec::new(),
            created_at: crate::clock::unix_millis(),
            slice_started_at: 0,
        };
        let run_id = record.run_id.clone();
        emit(
            &sink,
            &ctx,
            &run_id,
            RoutineEventKind::Started {
                routine: routine.full_id.clone(),
            },
        );
        let end = self.slice(owner, record, ctx, sink, cancel).await;
        let mut message = match end {
            SliceEnd::Finished(result) => json!({"status": "finished", "result": result}),
            SliceEnd::Stopped(Stop::Paused { question }) => json!({
                "status": "awaiting_user_input",
                "question": question,
                "message": "The routine asked the user this question (the user sees it). Do not answer it yourself; tell the user briefly that it waits for their answer.",
            }),
            SliceEnd::Stopped(Stop::Cancelled) => json!({"status": "cancelled"}),
            SliceEnd::Stopped(Stop::Failed { message, .. }) => {
                json!({"status": "error", "error": message})
            }
        };
        message["routine"] = json!(routine.full_id);
        message["run_id"] = json!(run_id.as_str());
        crate::pipeline::tools::toon(&message)
    }

    /// The user's message in a chat where a run waits: the run goes on with it as the
    /// answer. False when no run waits (the message is the main model's).
    pub async fn answer(
        &self,
        ctx: &TurnContext,
        sink: &Arc<dyn TurnSink>,
        text: &str,
        cancel: &CancellationToken,
    ) -> bool {
        let owner = UserHash::of(&ctx.user);
        let store = &self.inner.store;
        let run = match store.waiting(&owner, &ctx.chat_id).await {
            Ok(Some(run)) => run,
            Ok(None) => return false,
            Err(e) => {
                tracing::warn!(error = %e, "cannot look for a waiting routine");
                return false;
            }
        };
        let record = match store.get(&owner, &run).await {
            Ok(Some(r)) if r.status == RunStatus::Paused => r,
            other => {
                if let Err(e) = other {
                    tracing::warn!(error = %e, "cannot read a waiting routine");
                }
                // Expired, cancelled or unreadable: the message is the model's.
                let _ = store.clear_waiting(&owner, &ctx.chat_id).await;
                return false;
            }
        };
        let mut record = record;
        let question = record.question.take().unwrap_or_default();
        record.journal.push(Entry {
            kind: EffectKind::Ask,
            request: json!({ "question": question }),
            result: Value::String(text.to_string()),
        });
        record.status = RunStatus::Running;
        record.frames.clear();
        if let Err(e) = store.clear_waiting(&owner, &ctx.chat_id).await {
            tracing::warn!(error = %e, "cannot clear a waiting routine");
        }
        self.slice(owner, record, ctx.clone(), sink.clone(), cancel.clone())
            .await;
        true
    }

    /// Runs one slice and reports how it ended: the run's end frames, or its pause (saved,
    /// the chat's waiting run, `awaiting_user_input`).
    async fn slice(
        &self,
        owner: UserHash,
        mut record: RunRecord,
        ctx: TurnContext,
        sink: Arc<dyn TurnSink>,
        turn_cancel: CancellationToken,
    ) -> SliceEnd {
        let store = &self.inner.store;
        record.slice_started_at = crate::clock::unix_millis();
        let run_id = record.run_id.clone();
        let chat = record.chat_id.clone();
        let cancel = turn_cancel.child_token();
        // Dropped with this future (the turn gone): the script stops at its next step.
        let _stop_on_drop = cancel.clone().drop_guard();
        let ttl = self.inner.config.run_ttl;
        let mut end = match store.put(&owner, &record, ttl).await {
            Ok(()) => {
                self.execute(&owner, record, &ctx, &sink, cancel.clone())
                    .await
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot save a routine run");
                SliceEnd::Stopped(Stop::Failed {
                    code: RoutineErrorCode::JournalUnavailable,
                    message: "the run cannot be saved; try again shortly".into(),
                })
            }
        };
        if matches!(end, SliceEnd::Stopped(Stop::Paused { .. }))
            && store
                .cancel_requested(&owner, &run_id)
                .await
                .unwrap_or(false)
        {
            end = SliceEnd::Stopped(Stop::Cancelled);
        }
        self.report(&owner, &chat, &run_id, &ctx, &sink, end).await
    }

    /// Runs the saved run's script on a blocking thread, known meanwhile as running on this
    /// node; a pause is saved and becomes the chat's waiting run.
    async fn execute(
        &self,
        owner: &UserHash,
        record: RunRecord,
        ctx: &TurnContext,
        sink: &Arc<dyn TurnSink>,
        cancel: CancellationToken,
    ) -> SliceEnd {
        let run_id = record.run_id.clone();
        self.inner
            .running
            .insert(run_id.clone(), (owner.clone(), cancel.clone()));
        let slice = Arc::new(Slice::new(
            self.inner.clone(),
            owner.clone(),
            ctx.clone(),
            sink.clone(),
            cancel,
            record,
        ));
        let worker = slice.clone();
        let mut end =
            tokio::task::spawn_blocking(move || slice::execute(worker, engine::for_slice))
                .await
                .unwrap_or_else(|e| {
                    tracing::error!(error = %e, "routine slice failed");
                    SliceEnd::Stopped(Stop::Failed {
                        code: RoutineErrorCode::ScriptError,
                        message: "the routine failed inside chatd".into(),
                    })
                });
        self.inner.running.remove(&run_id);
        if let SliceEnd::Stopped(Stop::Paused { question }) = &end {
            let mut record = slice
                .record
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            record.status = RunStatus::Paused;
            record.question = Some(question.clone());
            if let Err(stop) = self.pause(owner, &record).await {
                end = SliceEnd::Stopped(stop);
            }
        }
        end
    }

    /// Tells the turn how the slice ended: `awaiting_user_input` for a pause; otherwise the
    /// run's error, if any, and its `routine_finished`, after the run is removed (and is no
    /// longer the chat's waiting run).
    async fn report(
        &self,
        owner: &UserHash,
        chat: &ChatId,
        run_id: &RunId,
        ctx: &TurnContext,
        sink: &Arc<dyn TurnSink>,
        end: SliceEnd,
    ) -> SliceEnd {
        let store = &self.inner.store;
        let event = |kind| emit(sink, ctx, run_id, kind);
        let outcome = match &end {
            SliceEnd::Stopped(Stop::Paused { question }) => {
                event(RoutineEventKind::Awaiting {
                    question: question.clone(),
                });
                return end;
            }
            SliceEnd::Finished(_) => RoutineOutcome::Completed,
            SliceEnd::Stopped(Stop::Cancelled) => RoutineOutcome::Cancelled,
            SliceEnd::Stopped(Stop::Failed { code, message }) => {
                tracing::info!(code = ?code, "routine run failed");
                event(RoutineEventKind::Error {
                    message: message.clone(),
                    code: Some(*code),
                });
                RoutineOutcome::Error
            }
        };
        if let Err(e) = store.delete(owner, run_id).await {
            tracing::warn!(error = %e, "cannot remove a finished routine run");
        }
        if let Ok(Some(waiting)) = store.waiting(owner, chat).await
            && &waiting == run_id
        {
            let _ = store.clear_waiting(owner, chat).await;
        }
        event(RoutineEventKind::Finished(outcome));
        end
    }

    /// Saves a paused run and makes it the chat's waiting run.
    async fn pause(&self, owner: &UserHash, record: &RunRecord) -> Result<(), Stop> {
        let store = &self.inner.store;
        let ttl = self.inner.config.run_ttl;
        let unavailable = |e: store::StoreFault| {
            tracing::warn!(error = %e, "cannot save a paused routine");
            Stop::Failed {
                code: RoutineErrorCode::JournalUnavailable,
                message: "the run cannot be saved; try again shortly".into(),
            }
        };
        store.put(owner, record, ttl).await.map_err(unavailable)?;
        let claimed = store
            .claim_waiting(owner, &record.chat_id, &record.run_id, ttl)
            .await
            .map_err(unavailable)?;
        if !claimed {
            return Err(Stop::Failed {
                code: RoutineErrorCode::ScriptError,
                message: "another routine already waits for the user's answer in this chat".into(),
            });
        }
        Ok(())
    }

    /// Slices running on this node.
    pub fn running(&self) -> usize {
        self.inner.running.len()
    }
}

fn emit(sink: &Arc<dyn TurnSink>, ctx: &TurnContext, run_id: &RunId, kind: RoutineEventKind) {
    sink.emit(
        ctx,
        TurnEvent::Routine(RoutineEvent {
            run_id: run_id.clone(),
            kind,
        }),
    );
}

#[cfg(test)]
mod tests;
