//! The one writer of a turn's frames. Every event of a turn (the pipeline's, its skills',
//! and the turn's own: started, history request, refusal) passes through here in order:
//! the writer numbers it (a log index for every frame, a `sequence` for every
//! `ai_message_update`), maps it to frames in the one mapper ([`crate::delivery::frames`])
//! and delivers them. Nothing else assigns a sequence.
//!
//! A skill result that arrives after the answer (`TurnEvent::FollowUp`) becomes a message
//! of its own, delivered by a writer of its own under a new task id.

use std::sync::{Arc, Mutex, PoisonError};

use chatd_protocol::{ServerMessage, TaskId};

use super::deps::TurnDeps;
use crate::crypto::UserHash;
use crate::delivery::{Audience, frames};
use crate::pipeline::{TurnContext, TurnEvent, TurnOutcome, TurnSink, Typing};

/// Numbers handed out so far. A std Mutex: held while one event is numbered and queued to
/// the devices' outboxes (no await), which keeps concurrent emitters (the answer and its
/// skills) in one order.
#[derive(Default)]
struct Numbers {
    /// Frames written (the log index of the newest).
    index: u64,
    /// `ai_message_update` frames written (the sequence of the newest).
    sequence: u64,
}

pub struct TurnWriter {
    deps: Arc<TurnDeps>,
    user: UserHash,
    task: TaskId,
    numbers: Mutex<Numbers>,
}

impl TurnWriter {
    pub fn new(deps: Arc<TurnDeps>, user: UserHash, task: TaskId) -> Arc<Self> {
        Arc::new(Self {
            deps,
            user,
            task,
            numbers: Mutex::new(Numbers::default()),
        })
    }

    /// A frame of the turn that is not a pipeline event (`ai_task_initiated`,
    /// `request_chat_history`, a refusal error).
    pub fn frame(&self, audience: Audience, msg: ServerMessage) {
        let mut n = self.numbers();
        n.index += 1;
        self.deps
            .hub
            .send_turn(&self.user, &audience, &self.task, n.index, &msg);
    }

    fn numbers(&self) -> std::sync::MutexGuard<'_, Numbers> {
        self.numbers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The automatic follow-up: a message of its own (typing, the text, the final frame),
    /// cached for the next turn, written by its own writer under a new task id.
    fn follow_up(&self, ctx: &TurnContext, text: Arc<str>) {
        let ctx = TurnContext {
            task_id: TaskId::random(),
            ..ctx.clone()
        };
        let deps = self.deps.clone();
        let user = self.user.clone();
        self.deps.tasks.spawn(async move {
            let writer = TurnWriter::new(deps.clone(), user.clone(), ctx.task_id.clone());
            writer.emit(&ctx, TurnEvent::Typing(Typing::default()));
            writer.emit(&ctx, TurnEvent::Chunk { text: text.clone() });
            super::stages::remember_answer(&deps, &user, &ctx, &text).await;
            writer.emit(
                &ctx,
                TurnEvent::Finished(TurnOutcome {
                    text,
                    ..TurnOutcome::default()
                }),
            );
        });
    }
}

impl TurnSink for TurnWriter {
    fn emit(&self, ctx: &TurnContext, event: TurnEvent) {
        if let TurnEvent::FollowUp { text } = event {
            return self.follow_up(ctx, text);
        }
        let mut n = self.numbers();
        let sequence = match &event {
            TurnEvent::Chunk { .. } => {
                n.sequence += 1;
                n.sequence
            }
            // The final frame is the next `ai_message_update`.
            TurnEvent::Finished(_) => n.sequence + 1,
            _ => 0,
        };
        if matches!(event, TurnEvent::Finished(_)) {
            n.sequence += 1;
        }
        for (audience, msg) in frames::map(ctx, event, sequence) {
            n.index += 1;
            self.deps
                .hub
                .send_turn(&self.user, &audience, &self.task, n.index, &msg);
        }
    }
}
