//! The speculative main call. Preprocessing is a model round trip of its own that the main
//! call must wait for (it picks the model, the tools and the prompt, and may refuse). While it
//! runs, the main call it most likely leads to is already sent: the chat's previous plan, or,
//! for a chat with no record yet, what preprocessing decides when the model reports nothing
//! notable. Once preprocessing is done, the early stream is kept only when the decided plan
//! is the same (so the request is byte-identical); otherwise, and on a refusal or a cancel,
//! it is dropped unread and the provider sees the hang-up. Nothing of it reaches a client
//! before preprocessing accepted the message: the harm gate stays in front.
//! The cost is a wasted main request per wrong guess (`chatd_speculative_main_calls_total`
//! counts the calls started, used and wasted; `chatd_speculative_wasted_input_tokens_total`
//! what the wasted ones cost). `pipeline.speculative_main_call`: `"auto"` (the default)
//! opens it always for models whose requests cost nothing and, for metered ones, for the
//! chats whose guesses are expected to miss least: a chat speculates while its expected
//! share of missed guesses (its own record of hits and misses, drawn towards the shared
//! record of every chat's guesses while it has few) is at most a threshold, and the
//! threshold follows the recent waste (the share of turns whose speculative call was thrown
//! away): the budget itself when the waste is at `pipeline.speculation_budget`, higher
//! while less is wasted (chats a little less sure of their guess may speculate too), lower,
//! down to none, while more is. So the waste stays near the budget and the chats that jump
//! between topics stop first. Guesses are scored also when no call was opened for them, so
//! a chat starts again once its guesses hit. `"on"` speculates for every model, `"off"`
//! never (and neither reads nor writes the record).
//!
//! The record (each chat's last plan and hits and misses, and the shared counts) is behind
//! the [`record::SpeculationRecords`] seam: in process in embedded mode, on Redis in
//! cluster mode, where every node reads and adds to the same one (a chat keeps its sticky
//! guess whichever node answers it). A turn reads it once, beside its preparation
//! ([`Predictions::recall`]), and writes it once, off its path ([`Predictions::remember`]);
//! a read that fails or is late counts as no record.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chatd_protocol::ChatId;
use futures_util::future::BoxFuture;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

use self::record::{
    ChatRecord, Outcome, SharedRecord, Snapshot, SpeculationRecords, StoredPlan, Tally,
};
use super::context::MainPlan;
use super::models::{Model, Models};
use crate::crypto::UserHash;
use crate::llm::{LlmError, LlmStream};

pub mod record;

/// How long the plan stage waits for a record read started beside the turn's preparation
/// (which takes a store round trip of its own, so the read is usually in): a record later
/// than that counts as none, and the first token never waits on a slow store.
pub const RECALL_WAIT: Duration = Duration::from_millis(25);

/// Weight of the shared record when a chat has few guesses of its own.
const PRIOR_WEIGHT: f32 = 2.0;
/// How fast the threshold moves away from the budget as the waste does.
const GAIN: f32 = 4.0;

/// The decisions made from the speculation record; the record itself is behind the
/// [`SpeculationRecords`] seam (in process, or shared by every node on Redis).
pub struct Predictions {
    records: Arc<dyn SpeculationRecords>,
}

impl Default for Predictions {
    fn default() -> Self {
        Self::new(Arc::new(record::memory::MemoryRecords::default()))
    }
}

/// A read of the record started early in a turn, on the turn's tracker.
pub struct Recall(JoinHandle<Snapshot>);

impl Recall {
    /// The record, waited for at most [`RECALL_WAIT`] more.
    pub async fn known(self) -> Snapshot {
        match tokio::time::timeout(RECALL_WAIT, self.0).await {
            Ok(Ok(known)) => known,
            Ok(Err(_)) => Snapshot::default(),
            Err(_) => {
                tracing::debug!("speculation record late: the turn guesses without it");
                Snapshot::default()
            }
        }
    }
}

/// The expected miss share up to which a chat speculates: the budget itself while the
/// waste is at the budget, higher while it is lower, lower (down to none) while higher.
fn threshold(shared: &SharedRecord, budget: f32) -> f32 {
    (budget + GAIN * (budget - shared.waste)).clamp(0.0, 1.0)
}

/// The share of guesses expected to miss: `tally`'s, drawn towards `prior` while it has few
/// observations (`weight` of them count for the prior).
fn expected(tally: &Tally, prior: f32, weight: f32) -> f32 {
    (tally.misses + weight * prior) / (tally.hits + tally.misses + weight)
}

impl StoredPlan {
    fn of(plan: &MainPlan) -> Self {
        Self {
            model: plan.model.spec.id.clone(),
            category: plan.category.clone(),
            language: plan.language.clone(),
            skills: plan.skills.clone(),
            focus_mode: plan.focus_mode.clone(),
            injection_caution: plan.injection_caution,
        }
    }

    /// The plan again, while the catalog still has its model.
    fn plan(&self, models: &Models) -> Option<MainPlan> {
        Some(MainPlan {
            model: models.get(&self.model)?,
            category: self.category.clone(),
            language: self.language.clone(),
            skills: self.skills.clone(),
            focus_mode: self.focus_mode.clone(),
            injection_caution: self.injection_caution,
        })
    }
}

impl Predictions {
    pub fn new(records: Arc<dyn SpeculationRecords>) -> Self {
        Self { records }
    }

    /// Starts reading the chat's record and the shared one (one round trip); a read that
    /// fails counts as knowing nothing (logged at debug, without the chat).
    pub fn recall(&self, tasks: &TaskTracker, user: &UserHash, chat: &ChatId) -> Recall {
        let (records, user, chat) = (self.records.clone(), user.clone(), chat.clone());
        Recall(tasks.spawn(async move {
            records.read(&user, &chat).await.unwrap_or_else(|e| {
                tracing::debug!(error = %e, "speculation record unreadable: nothing known");
                Snapshot::default()
            })
        }))
    }

    /// The plan to open the early call with: the chat's last one, taking what this turn
    /// fixes already (a pinned model, the active focus mode), else `fallback()`.
    pub fn guess(
        &self,
        known: &Snapshot,
        models: &Models,
        pinned: Option<&Model>,
        active_focus: Option<&str>,
        fallback: impl FnOnce() -> MainPlan,
    ) -> MainPlan {
        let last = known.chat.as_ref().and_then(|r| r.plan.plan(models));
        let Some(mut plan) = last else {
            return fallback();
        };
        if let Some(m) = pinned {
            plan.model = m.clone();
        }
        // The turn's focus mode is known before preprocessing (the chat's record).
        plan.focus_mode = active_focus.map(str::to_string);
        plan
    }

    /// The share of this chat's guesses expected to miss: its own record, drawn towards the
    /// shared one while it has few turns (a new chat takes the shared one's).
    pub fn expected_miss(&self, known: &Snapshot) -> f32 {
        let prior = expected(&known.shared.tally, 0.0, 1.0);
        match &known.chat {
            Some(r) => expected(&r.tally, prior, PRIOR_WEIGHT),
            None => prior,
        }
    }

    /// Whether a speculative call for this chat is worth it when a miss throws away one
    /// main call's input and the nodes may waste `budget` of the main calls' input tokens:
    /// its expected miss share within the threshold (see the module doc).
    pub fn worth_it(&self, known: &Snapshot, budget: f64) -> bool {
        if budget <= 0.0 {
            return false;
        }
        self.expected_miss(known) <= threshold(&known.shared, budget as f32)
    }

    /// Records the plan the turn decided (given what was `known` when it started), whether
    /// the guess made for it was right (`None`: no guess was made, or the turn decided
    /// nothing to compare) and whether a call was opened for it (a wrong guess then wasted
    /// one). The returned write (one round trip) is the caller's to run off the turn's path.
    pub fn remember(
        &self,
        user: &UserHash,
        chat: &ChatId,
        known: &Snapshot,
        plan: &MainPlan,
        hit: Option<bool>,
        speculated: bool,
    ) -> impl Future<Output = ()> + Send + 'static {
        let mut tally = known.chat.as_ref().map(|r| r.tally).unwrap_or_default();
        if let Some(hit) = hit {
            tally.record(hit);
        }
        let record = ChatRecord {
            plan: StoredPlan::of(plan),
            tally,
        };
        let outcome = hit.map(|hit| Outcome { hit, speculated });
        let (records, user, chat) = (self.records.clone(), user.clone(), chat.clone());
        async move {
            if let Err(e) = records.write(&user, &chat, record, outcome).await {
                tracing::debug!(error = %e, "speculation record not written");
            }
        }
    }

    /// Drops the chat's record (the chat was deleted).
    pub async fn forget(&self, user: &UserHash, chat: &ChatId) {
        if let Err(e) = self.records.forget(user, chat).await {
            tracing::debug!(error = %e, "speculation record not dropped");
        }
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// The default catalog: one simulated model.
    fn models() -> Models {
        let config = crate::config::Config::defaults().unwrap();
        let sim = Arc::new(crate::llm::SimulatedClient::new(Duration::ZERO));
        Models::from_config(&config, sim).unwrap()
    }

    fn plan(category: &str) -> MainPlan {
        MainPlan {
            model: models().main(),
            category: category.into(),
            language: "en".into(),
            skills: Vec::new(),
            focus_mode: None,
            injection_caution: false,
        }
    }

    fn chat(id: &str) -> ChatId {
        ChatId::parse(id).unwrap()
    }

    fn user() -> UserHash {
        UserHash::from_hex(&"b".repeat(32)).unwrap()
    }

    async fn known(p: &Predictions, c: &str) -> Snapshot {
        p.recall(&TaskTracker::new(), &user(), &chat(c))
            .known()
            .await
    }

    /// One turn of chat `c`: what it knew, then what it decided.
    async fn turn(p: &Predictions, c: &str, decided: &str, hit: bool, speculated: bool) {
        let k = known(p, c).await;
        let write = p.remember(&user(), &chat(c), &k, &plan(decided), Some(hit), speculated);
        write.await;
    }

    #[tokio::test]
    async fn chats_whose_guesses_miss_stop_speculating_and_start_again_when_they_hit() {
        let p = Predictions::default();
        // Nothing known: the shared record is empty, so a new chat speculates.
        assert!(p.worth_it(&known(&p, "steady").await, 0.1));
        for _ in 0..10 {
            turn(&p, "steady", "a", true, false).await;
        }
        for i in 0..10 {
            let decided = if i % 2 == 0 { "a" } else { "b" };
            turn(&p, "jumpy", decided, false, false).await;
        }
        let (steady, jumpy) = (known(&p, "steady").await, known(&p, "jumpy").await);
        assert!(p.worth_it(&steady, 0.1), "{}", p.expected_miss(&steady));
        assert!(!p.worth_it(&jumpy, 0.1), "{}", p.expected_miss(&jumpy));
        // A new chat takes the shared record: half of the guesses missed.
        let fresh = known(&p, "fresh").await;
        assert!((p.expected_miss(&fresh) - 10.0 / 21.0).abs() < 1e-6);
        // Guesses are scored while not speculating; once they hit, the chat speculates again.
        for _ in 0..100 {
            turn(&p, "jumpy", "a", true, false).await;
        }
        let jumpy = known(&p, "jumpy").await;
        assert!(p.worth_it(&jumpy, 0.1), "{}", p.expected_miss(&jumpy));
        // The sticky guess is the chat's last plan (its model found in the catalog).
        let guess = |k: &Snapshot| p.guess(k, &models(), None, None, || plan("z")).category;
        assert_eq!(guess(&jumpy), "a");
        assert_eq!(guess(&fresh), "z");
        // A model the catalog no longer has: the fallback.
        let mut gone = jumpy.clone();
        if let Some(r) = gone.chat.as_mut() {
            r.plan.model = "gone".into();
        }
        assert_eq!(guess(&gone), "z");
        p.forget(&user(), &chat("jumpy")).await;
        assert_eq!(known(&p, "jumpy").await.chat, None, "forgotten");
    }

    #[tokio::test]
    async fn the_threshold_follows_the_recent_waste() {
        let p = Predictions::default();
        // Four of ten guesses missed, none of them with a call opened: nothing was wasted,
        // so a chat this unsure may speculate (the threshold is 5x the budget).
        for i in 0..10 {
            turn(&p, "unsure", "a", i % 3 != 0, false).await;
        }
        let unsure = known(&p, "unsure").await;
        let expected = p.expected_miss(&unsure);
        assert!(expected > 0.1 && expected < 0.5, "{expected}");
        assert!(p.worth_it(&unsure, 0.1));
        // Speculative calls thrown away raise the waste: the threshold falls to none.
        for _ in 0..20 {
            turn(&p, "jumping", "b", false, true).await;
        }
        assert!(!p.worth_it(&known(&p, "unsure").await, 0.1));
        assert!(!p.worth_it(&known(&p, "new").await, 0.1));
        let unsure = known(&p, "unsure").await;
        assert!(!p.worth_it(&unsure, 0.0), "a budget of 0 never speculates");
    }
}
