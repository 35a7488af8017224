//! The last stage: the answer (also a partial one) sealed into the AI cache before the final
//! frame, the turn's messages settled, the final frame, the turn metrics, and
//! postprocessing started on the turn tracker.

use super::answer::Answered;
use super::prepare::Ready;
use super::{Settled, Turn};
use crate::metrics::OutcomeLabel;
use crate::turn::lease_clock::Standing;
use chatd_protocol::MessageId;
use std::sync::Arc;

use crate::pipeline::preprocess::Preprocessed;
use crate::pipeline::{HistoryRole, Interruption, TurnContext, TurnEvent, TurnOutcome, TurnSink};
use crate::turn::compress::{self, CompressJob};
use crate::turn::post::{PostJob, Reprocess, run_postprocessing};

/// How often the end of a turn whose lease lapsed asks the store to confirm it.
const LEASE_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

impl Turn<'_> {
    /// Renews a lapsed lease until the store answers (held, taken, or lost while it had
    /// lapsed), or the server shuts down: ending the turn on this node's word while the
    /// store cannot be reached let a node cut off Redis write its answer after another had
    /// ended the turn with `node_lost` (chaos: divergent endings). Meanwhile the writer
    /// holds the turn's frames; the chat's other messages wait, or another node takes the
    /// turn over.
    async fn confirm_lease(&self) {
        let clock = &self.ticket.lease_clock;
        loop {
            self.deps.turns.renew(self.ticket).await;
            if clock.standing() != Standing::Lapsed || self.deps.shutdown.is_cancelled() {
                return;
            }
            tokio::select! {
                () = self.deps.shutdown.cancelled() => return,
                () = tokio::time::sleep(LEASE_RETRY) => {}
            }
        }
    }

    pub(in crate::turn) async fn finish(&self, ready: &Ready, answered: Answered) {
        let app = self.deps.as_ref();
        let Answered {
            mut outcome,
            ctx,
            whole,
            reprocess,
            context_window,
        } = answered;
        // A lease that lapsed by this node's clock (a pause, a cut from the store) is
        // confirmed before anything is written back: lost, the turn writes nothing.
        if !self.ticket.lease_clock.holds() {
            self.confirm_lease().await;
        }
        // Lost while it had lapsed: the writer ended the turn with what its log held (as
        // another node may have done) and takes no more of its frames. Once it has acted
        // on the store's word: a turn lost before any of its frames was logged ended
        // without a frame, and its messages are released for the client's copy.
        let lost = self.ticket.interruption() == Interruption::NodeLost;
        if lost {
            outcome.interrupted = Some(Interruption::NodeLost);
            tokio::select! {
                () = self.writer.settled() => {}
                () = app.shutdown.cancelled() => {}
            }
        }
        let unseen = lost && self.ticket.lease_clock.was_lost_unseen();
        let answered = !outcome.text.trim().is_empty() && !self.ticket.abandoned();
        if answered {
            self.remember(&ctx, &outcome.text).await;
        }
        let privacy = ready.privacy.as_deref();
        crate::privacy::save(&app.ai_cache, &self.owner, self.chat, privacy).await;
        // A turn abandoned here was answered elsewhere or as lost (another node took its
        // lease and ended it with `node_lost`, which that node settled: releasing the ids
        // here would undo it), or its chat is gone: a copy is a duplicate. Only a turn that
        // gave no answer (or was lost before any device heard of it) releases its messages
        // for another try.
        self.settle(match answered || (self.ticket.abandoned() && !unseen) {
            true => Settled::Answered,
            false => Settled::Unanswered,
        })
        .await;
        let label = outcome_label(&outcome);
        if let Some(e) = &outcome.error {
            tracing::warn!(error = %e, "turn ended with an error");
        }
        let postprocess = label == "completed" && app.pipeline.postprocessing;
        let answer = outcome.text.clone();
        let kept = answered.then(|| ctx.assistant_message_id());
        self.writer.emit(&ctx, TurnEvent::Finished(outcome));
        app.metrics
            .turn_seconds
            .observe(self.started.elapsed().as_secs_f64());
        if label == "completed" {
            self.compress(ready, &ctx, context_window, &answer);
        }
        if postprocess {
            let job = self.post_job(ready, ctx, answer, whole, reprocess);
            let run = run_postprocessing(self.deps.clone(), self.writer.clone(), job);
            app.tasks.spawn(run);
        }
        self.frames_out(label, kept).await;
    }

    /// Waits until the turn's frames are out (logged and published, or dropped at the
    /// store's word on a lapsed lease, which is renewed meanwhile) before the chat's next
    /// turn writes its own: devices on other nodes get them in turn order. `kept`: the
    /// answer's id, when it was kept for devices that left.
    async fn frames_out(&self, label: &'static str, kept: Option<MessageId>) {
        let app = self.deps.as_ref();
        tokio::select! {
            () = self.writer.settled() => {}
            () = app.shutdown.cancelled() => {}
        }
        // The lease lapsed after the answer was kept (while its last frames were being
        // logged) and the store forgot the turn: the writer ended it with `node_lost` and
        // the text its log held, so a device that comes later must not get the whole
        // answer as pending (chaos run AH: one device got both).
        if let Some(id) = kept.filter(|_| self.ticket.lease_clock.was_ended_lost())
            && let Err(e) = app.ai_cache.drop_pending(&self.owner, id.as_str()).await
        {
            tracing::warn!(error = %e, "cannot drop the pending answer of a lost turn");
        }
        // Counted once its ending is in the log: a device that resumes the turn on any
        // node after the count reads how it ended.
        app.metrics
            .turns
            .get_or_create(&OutcomeLabel { outcome: label })
            .inc();
    }

    /// Starts compressing the chat's history on the turn tracker when it may have passed
    /// `pipeline.compress_at` (`crate::turn::compress`): after the final frame, beside
    /// postprocessing, never in front of a first token.
    fn compress(&self, ready: &Ready, ctx: &TurnContext, window: u32, answer: &str) {
        if !compress::maybe_due(self.deps, window, &ready.history, answer) {
            return;
        }
        let job = CompressJob {
            ctx: ctx.clone(),
            window,
            models: ready.models.clone(),
        };
        let run = compress::run_compression(self.deps.clone(), self.writer.clone(), job);
        self.deps.tasks.spawn(run);
    }

    /// Seals the answer into the AI cache (before the final frame), noting whether a device
    /// that asked is still connected here.
    async fn remember(&self, ctx: &TurnContext, text: &str) {
        let requesters = &self.ticket.requesters;
        let requester_here = self
            .deps
            .outlet
            .delivery
            .hub
            .devices(&self.owner)
            .iter()
            .any(|d| requesters.contains(&d.conn_id) && !d.outbox.is_closed());
        let cache = &self.deps.ai_cache;
        crate::history::remember(cache, &self.owner, ctx, text, requester_here).await;
    }

    /// What postprocessing needs of the finished turn.
    fn post_job(
        &self,
        ready: &Ready,
        ctx: TurnContext,
        answer: Arc<str>,
        whole: Preprocessed,
        reprocess: Option<Reprocess>,
    ) -> PostJob {
        let user_message = ready
            .history
            .iter()
            .rev()
            .find(|h| h.role == HistoryRole::User)
            .map(|h| h.content.clone())
            .unwrap_or_default();
        let mut tags = ready.opts.chat_tags.clone();
        for t in &whole.tags {
            if !tags.contains(t) {
                tags.push(t.clone());
            }
        }
        PostJob {
            ctx,
            user_message,
            answer,
            previous_summary: ready.opts.chat_summary.clone(),
            tags,
            follow_ups_enabled: ready.opts.follow_ups_enabled,
            skill_suggestions: self.writer.skill_suggestions(),
            reprocess,
            new_settings_memories: whole.new_settings_memories,
            models: ready.models.clone(),
            privacy: ready.privacy.clone(),
        }
    }
}

/// The turn's outcome as its metric labels it.
fn outcome_label(outcome: &TurnOutcome) -> &'static str {
    match (&outcome.interrupted, &outcome.error, &outcome.rejection) {
        (Some(Interruption::Cancelled), _, _) => "cancelled",
        (Some(Interruption::Shutdown), _, _) => "shutdown",
        (Some(Interruption::NodeLost), _, _) => "error",
        (None, Some(_), _) => "error",
        (None, None, Some(_)) => "rejected",
        (None, None, None) => "completed",
    }
}
