//! The one writer of a turn's frames. Every event of a turn (the pipeline's, its skills',
//! and the turn's own: started, history request, refusal) passes through here in order:
//! the writer numbers it (a log index for every frame, a `sequence` for every
//! `ai_message_update`), maps it to frames in the one mapper ([`crate::delivery::frames`])
//! and logs them. With the log in this process (embedded mode) this node's devices get
//! them at once; with a log outside it (cluster mode) its flusher, an owned task, seals and
//! appends them in the same order and hands each to the devices here and on the other nodes
//! once the log took it, so no device sees a frame its log lacks. Nothing else assigns a
//! sequence. When the last handle on the writer goes (the turn, its postprocessing and its
//! skills are done), the flusher ends the log.
//!
//! The writer is a leaf: it writes to its [`Outlet`] (the devices, the other nodes, the log,
//! the metrics) and starts nothing. A skill result that arrives after the answer
//! (`TurnEvent::FollowUp`) goes to the outlet's follow-up hook, which the runner gives
//! (admission as a follow-up message, [`super::follow_up`]).

mod ended;
pub use ended::AnsweredTurn;
mod flush;
mod recent;

use std::sync::{Arc, Mutex, PoisonError, Weak};

use chatd_protocol::{AiMessageUpdate, ChatId, MessageId, ServerMessage, TaskId};

use dashmap::DashMap;
use futures_util::FutureExt;
use tokio::sync::{mpsc, watch};
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::lease_clock::LeaseClock;
use super::log::{LogEntry, TurnLog};
use super::store::LogSlot;
use crate::crypto::UserHash;
use crate::delivery::frames::{self, LostTurn, Notice};
use crate::delivery::outbox::EncodedFrame;
use crate::delivery::{Audience, Delivery};
use crate::metrics::{Metrics, SpeculationLabel};
use crate::pipeline::{TurnContext, TurnEvent, TurnSink};
use recent::Recent;

/// What a skill's late result becomes: given to the outlet by whoever runs turns (the
/// writer hands it on and starts nothing).
pub type FollowUps = Box<dyn Fn(&TurnContext, Arc<str>) + Send + Sync>;

/// Where a node's turn writers write: this node's devices and the other nodes, the turn
/// logs, the metrics; the flushers run on `tasks`. It also knows the writers running here,
/// so a device that resumes can wait for what they wrote to reach the log, and keeps the
/// logs of turns that ended here lately, to write back to a store that lost them.
pub struct Outlet {
    pub delivery: Arc<Delivery>,
    pub log: TurnLog,
    metrics: Arc<Metrics>,
    tasks: TaskTracker,
    /// The writers of turns running on this node (entries leave when a writer is dropped).
    writers: DashMap<TaskId, Weak<TurnWriter>>,
    follow_ups: FollowUps,
    /// The logs of turns that ended here lately, to append again to a store that lost them.
    ended: ended::EndedLogs,
}

impl Outlet {
    pub fn new(
        delivery: Arc<Delivery>,
        log: TurnLog,
        metrics: Arc<Metrics>,
        tasks: TaskTracker,
        follow_ups: FollowUps,
    ) -> Self {
        Self {
            delivery,
            log,
            metrics,
            tasks,
            writers: DashMap::new(),
            follow_ups,
            ended: ended::EndedLogs::default(),
        }
    }

    /// Waits until every frame this node's writer of `task` has written so far is in the
    /// log (at once when no writer of it runs here).
    pub async fn flushed(&self, task: &TaskId) {
        let writer = self.writers.get(task).and_then(|w| w.upgrade());
        if let Some(writer) = writer {
            writer.flushed().await;
        }
    }
}

/// Skill suggestions kept for postprocessing (it shows at most 6).
const MAX_SKILL_SUGGESTIONS: usize = 12;

/// What has been written so far. A std Mutex: held while one event is numbered, delivered
/// to the devices' outboxes and queued for the log (no await), which keeps concurrent
/// emitters (the answer and its skills) in one order.
#[derive(Default)]
struct Written {
    /// Frames written (the log index of the newest).
    index: u64,
    /// `ai_message_update` frames written (the sequence of the newest).
    sequence: u64,
    /// `thinking_chunk` frames written (their own sequence).
    thinking: u64,
    /// Follow-up suggestions the turn's skills returned, for postprocessing.
    suggestions: Vec<String>,
    /// The answer's text as the newest chunk had it (chunks are logged as what they add).
    text: String,
    /// When the turn started, until its first chunk is timed
    /// (`chatd_turn_first_chunk_seconds`).
    first_chunk_from: Option<std::time::Instant>,
    /// What became of the turn's speculative main call, for the split first-token time
    /// (`chatd_turn_first_token_seconds{speculation}`); unset until the decision.
    speculation: Option<&'static str>,
}

/// A frame on its way to the log, then to this node's devices and the other nodes.
struct Logged {
    index: u64,
    /// The log entry in its stored form (see [`LogEntry::encode`]).
    entry: Vec<u8>,
    audience: Audience,
    frame: EncodedFrame,
    msg: ServerMessage,
    /// For the other nodes too (there are some).
    publish: bool,
}

/// Which turn a writer writes, and where its log goes.
pub struct TurnKey {
    pub owner: UserHash,
    pub chat: ChatId,
    pub task: TaskId,
    /// The user message the turn answers.
    pub message: MessageId,
    /// The lease generation the log appends are fenced with.
    pub generation: u64,
    /// The lease by this node's clock, when a renewal keeps it: while it lapsed the
    /// flusher holds the turn's frames until the store's word (see [`LeaseClock`]).
    pub lease: Option<Arc<LeaseClock>>,
}

pub struct TurnWriter {
    outlet: Arc<Outlet>,
    key: Arc<TurnKey>,
    written: Mutex<Written>,
    /// To the flusher (a log outside this process); `None` when the log is in process
    /// and appends happen as frames are written. Unbounded, but a turn's frames are
    /// bounded by the turn itself.
    log: Option<mpsc::UnboundedSender<Logged>>,
    /// The newest index the flusher has appended (or given up on).
    flushed: watch::Receiver<u64>,
    /// The newest index the flusher has appended or dropped, with none before it waiting
    /// (for the store, or for the lease's verdict).
    settled: watch::Receiver<u64>,
}

impl TurnWriter {
    /// A writer for `key`'s turn; its flusher runs on the turn tracker.
    pub fn new(outlet: Arc<Outlet>, key: TurnKey) -> Arc<Self> {
        Self::continuing(outlet, key, (0, 0), &[])
    }

    /// A writer that goes on with a turn another node began (a taker ending it): its frames
    /// follow the log's newest `index` and `ai_message_update` number `sequence`. It keeps
    /// the log's `entries` as if it had appended them: a store that loses the log while
    /// the ending is written, or after (see `ended`), gets it back whole, not only the
    /// ending (a device resuming from the start was told the log could not recover it).
    pub fn continuing(
        outlet: Arc<Outlet>,
        key: TurnKey,
        (index, sequence): (u64, u64),
        entries: &[(u64, LogEntry)],
    ) -> Arc<Self> {
        let (flushed_tx, flushed) = watch::channel(index);
        let (settled_tx, settled) = watch::channel(index);
        let key = Arc::new(key);
        let log = if outlet.log.in_process() {
            None
        } else {
            let (tx, rx) = mpsc::unbounded_channel();
            let had = (flush::Tip::new(index, sequence), Recent::of(entries));
            let progress = (flushed_tx, settled_tx);
            let flush = flush::flush(outlet.clone(), key.clone(), rx, progress, had);
            // Its warnings name the turn (chaos runs are traced by task id).
            let span = tracing::info_span!("flush", chat_id = %key.chat, task_id = %key.task);
            outlet.tasks.spawn(flush.instrument(span));
            Some(tx)
        };
        let writer = Arc::new(Self {
            outlet: outlet.clone(),
            key,
            written: Mutex::new(Written {
                index,
                sequence,
                thinking: 0,
                suggestions: Vec::new(),
                text: String::new(),
                first_chunk_from: None,
                speculation: None,
            }),
            log,
            flushed,
            settled,
        });
        outlet
            .writers
            .insert(writer.key.task.clone(), Arc::downgrade(&writer));
        writer
    }

    /// A frame of the turn itself (started, asking for the history, refused), to `audience`.
    pub fn notice(&self, audience: Audience, notice: Notice) {
        let k = &self.key;
        let msg = frames::notice(&k.chat, &k.task, &k.message, notice);
        let mut w = self.written();
        self.write(&mut w, audience, msg);
    }

    /// Ends a lost turn (taken over from a node that stopped): its final frames follow
    /// what the log holds, the final update numbered after the logged ones.
    pub fn end_lost(&self, lost: LostTurn) {
        let mut w = self.written();
        w.sequence += 1;
        for (audience, msg) in frames::node_lost(lost, w.sequence) {
            self.write(&mut w, audience, msg);
        }
    }

    /// Ends a lost turn whose log holds its final update `last` but not all that follows
    /// it: the frames of the ending the log lacks (`missing` of [`frames::after_final`]).
    pub fn end_after_final(
        &self,
        last: &AiMessageUpdate,
        missing: impl Fn(&ServerMessage) -> bool,
    ) {
        let mut w = self.written();
        for (audience, msg) in frames::after_final(last) {
            if missing(&msg) {
                self.write(&mut w, audience, msg);
            }
        }
    }

    /// Times the first chunk from `started` (a turn's answer; not a follow-up or an ending
    /// written by another node).
    pub fn time_first_chunk(&self, started: std::time::Instant) {
        self.written().first_chunk_from = Some(started);
    }

    /// Labels the first chunk's time with what became of the speculative main call
    /// (`used`, `wasted` or `off`).
    pub fn speculation(&self, outcome: &'static str) {
        self.written().speculation = Some(outcome);
    }

    fn written(&self) -> std::sync::MutexGuard<'_, Written> {
        self.written.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Numbers, delivers and logs one frame (the caller holds the lock). The frame is
    /// encoded once, for the devices and the log alike.
    fn write(&self, w: &mut Written, audience: Audience, msg: ServerMessage) {
        w.index += 1;
        let encoded = EncodedFrame::new(&msg);
        let entry = LogEntry::encode(&audience, &msg, encoded.text.as_str(), &w.text);
        if let ServerMessage::AiMessageUpdate(u) = &msg {
            w.text.clone_from(&u.full_content_so_far);
        }
        let k = &self.key;
        let Some(flusher) = &self.log else {
            // An in-process log appends at once (its store never waits), and nobody else
            // can take the turn over: this node's devices get the frame at once.
            let hub = &self.outlet.delivery.hub;
            hub.send_turn(&k.owner, &audience, &k.task, w.index, encoded, &msg);
            let slot = LogSlot::new(k.generation, w.index);
            let appended = (self.outlet.log)
                .append(&k.owner, &k.chat, &k.task, slot, &entry)
                .now_or_never();
            if let Some(Err(e)) = appended {
                tracing::warn!(error = %e, "could not log a turn frame");
            }
            return;
        };
        // A log outside this process: every device, here and on the other nodes, gets the
        // frame once the log took it. A frame the log never takes (this node cut off from
        // Redis while another node takes the turn over) reaches no device, so every device
        // sees the turn the way its log tells it.
        let publish = self.outlet.delivery.has_peers();
        // The flusher is gone only at shutdown.
        let _ = flusher.send(Logged {
            index: w.index,
            entry,
            audience,
            frame: encoded,
            msg,
            publish,
        });
    }

    /// Waits until every frame written so far is in the log (so a resume that reads the
    /// log misses nothing this node delivered before it).
    pub async fn flushed(&self) {
        self.reached(&self.flushed).await;
    }

    /// Waits until every frame written so far is in the log or dropped for good: none waits
    /// for the store or for the lease's verdict (the end of a turn: its lease is renewed
    /// meanwhile, so a lapse gets its verdict).
    pub async fn settled(&self) {
        self.reached(&self.settled).await;
    }

    /// Waits until the flusher's `progress` reached the newest frame written so far (at
    /// once with the log in this process).
    async fn reached(&self, progress: &watch::Receiver<u64>) {
        if self.log.is_none() {
            return;
        }
        let target = self.written().index;
        let _ = progress.clone().wait_for(|&p| p >= target).await;
    }

    /// The follow-up suggestions the turn's skills returned so far.
    pub fn skill_suggestions(&self) -> Vec<String> {
        self.written().suggestions.clone()
    }
}

impl Drop for TurnWriter {
    fn drop(&mut self) {
        self.outlet.writers.remove(&self.key.task);
        if self.log.is_none() {
            // The flusher ends a log outside this process; an in-process one ends here.
            let _ = self
                .outlet
                .log
                .end(&self.key.chat, &self.key.task, self.key.generation)
                .now_or_never();
        }
    }
}

impl TurnSink for TurnWriter {
    fn emit(&self, ctx: &TurnContext, event: TurnEvent) {
        if let TurnEvent::FollowUp { text } = event {
            return (self.outlet.follow_ups)(ctx, text);
        }
        let mut w = self.written();
        if let TurnEvent::SkillSuggestions(list) = event {
            for s in list {
                if w.suggestions.len() < MAX_SKILL_SUGGESTIONS && !w.suggestions.contains(&s) {
                    w.suggestions.push(s);
                }
            }
            return;
        }
        let sequence = match &event {
            TurnEvent::Chunk { .. } | TurnEvent::Finished(_) | TurnEvent::Corrected { .. } => {
                w.sequence += 1;
                w.sequence
            }
            TurnEvent::Thinking { .. } => {
                w.thinking += 1;
                w.thinking
            }
            _ => 0,
        };
        if matches!(event, TurnEvent::Chunk { .. })
            && let Some(started) = w.first_chunk_from.take()
        {
            let metrics = &self.outlet.metrics;
            let seconds = started.elapsed().as_secs_f64();
            metrics.ttft_seconds.observe(seconds);
            if let Some(speculation) = w.speculation {
                metrics
                    .first_token_seconds
                    .get_or_create(&SpeculationLabel { speculation })
                    .observe(seconds);
            }
        }
        for (audience, msg) in frames::map(ctx, event, sequence) {
            self.write(&mut w, audience, msg);
        }
    }
}
