//! The plan stage's speculation (see [`crate::pipeline::speculation`]): the chat's record
//! read beside the turn's preparation, the guessed plan and its early request, and the
//! decided plan recorded off the turn's path. The main request is built here too, the same
//! for the early call and the confirmed one.

use chatd_protocol::ChatId;

use super::Turn;
use super::prepare::Ready;
use crate::clock;
use crate::config::Speculation;
use crate::crypto::UserHash;
use crate::llm::LlmRequest;
use crate::memories::recall::Recalled;
use crate::pipeline::HistoryEntry;
use crate::pipeline::context::{self, MainPlan};
use crate::pipeline::speculation::Recall;
use crate::pipeline::speculation::record::Snapshot;
use crate::pipeline::tools::ToolRunner;
use crate::turn::TurnDeps;
use crate::turn::report::speculation_outcome;

/// The speculative main call's plan and request.
pub(super) struct Guess {
    pub(super) plan: MainPlan,
    pub(super) request: LlmRequest,
    /// History messages the request left out.
    pub(super) dropped: usize,
}

/// Builds the main request of a plan, the same for the early call and the confirmed one:
/// at most `max_output_tokens`, with the chat's prompt-cache key and the end user's hash.
pub(super) struct Requests<'p> {
    deps: &'p TurnDeps,
    tools: &'p dyn ToolRunner,
    history: &'p [HistoryEntry],
    cache_key: String,
    /// The provider's `user` field (see [`provider_user`]).
    user: String,
    datetime: String,
    /// The chat's summary block (see [`crate::pipeline::summary`]): known before the turn,
    /// so the early call carries it like the confirmed one.
    summary: Option<String>,
}

impl Requests<'_> {
    /// The request and how many history messages it left out; the chat's summary and the
    /// `recalled` settings/memories (only the confirmed call carries them) join the turn's
    /// trailing system message as data, after the history (see [`context`]).
    pub(super) async fn build(
        &self,
        plan: &MainPlan,
        recalled: Option<&Recalled>,
    ) -> (LlmRequest, usize) {
        let app = self.deps;
        let data = recalled.and_then(Recalled::data_block);
        let blocks: Vec<&str> = self
            .summary
            .iter()
            .chain(&data)
            .map(String::as_str)
            .collect();
        let (mut request, dropped) = context::main_request(
            &app.instructions,
            self.tools,
            plan,
            self.history,
            &self.datetime,
            &blocks,
            app.pipeline.answer_reserve_tokens,
        )
        .await;
        request.max_tokens = Some(app.max_output_tokens);
        request.cache_key = Some(self.cache_key.clone());
        request.user = Some(self.user.clone());
        (request, dropped)
    }
}

impl Turn<'_> {
    /// The builder of the turn's main requests.
    pub(super) fn requests<'p>(
        &'p self,
        tools: &'p dyn ToolRunner,
        ready: &'p Ready,
    ) -> Requests<'p> {
        Requests {
            deps: self.deps,
            tools,
            history: &ready.history,
            cache_key: prompt_cache_key(&self.owner, self.chat),
            user: provider_user(&self.owner),
            datetime: clock::now_rfc3339(),
            summary: self.summary_block(ready),
        }
    }

    /// Starts reading the chat's speculation record, to run beside the turn's preparation
    /// (none while speculation is off).
    pub(in crate::turn) fn speculation_record(&self) -> Option<Recall> {
        let app = self.deps.as_ref();
        (app.pipeline.speculative_main_call != Speculation::Off)
            .then(|| app.predictions.recall(&app.tasks, &self.owner, self.chat))
    }

    /// What the record read beside the preparation says (`None`: speculation is off).
    pub(super) async fn known(&self, record: Option<Recall>) -> Option<Snapshot> {
        Some(record?.known().await)
    }

    /// The chat's likely main call (its last plan, or what an unremarkable preprocessing
    /// reply would decide), unless speculation is off.
    pub(super) fn guess(
        &self,
        known: Option<&Snapshot>,
        ready: &Ready,
        active_focus: Option<&str>,
        fresh: impl FnOnce() -> MainPlan,
    ) -> Option<MainPlan> {
        let app = self.deps.as_ref();
        let known = known?;
        let pinned = ready.opts.pinned_model.as_deref();
        let pinned = pinned.and_then(|id| ready.models.get(id));
        let guess =
            app.predictions
                .guess(known, &ready.models, pinned.as_ref(), active_focus, fresh);
        Some(guess)
    }

    /// Opens the guessed main call beside preprocessing: always when speculation is on or
    /// the model is free, and for a metered model while the chat's guesses hit often enough.
    pub(super) async fn speculate(
        &self,
        known: Option<&Snapshot>,
        guessed: Option<&MainPlan>,
        requests: &Requests<'_>,
    ) -> Option<Guess> {
        let app = self.deps.as_ref();
        let (known, plan) = (known?, guessed?);
        let worth_it = app.pipeline.speculative_main_call == Speculation::On
            || !plan.model.client.is_metered()
            || app
                .predictions
                .worth_it(known, app.pipeline.speculation_budget);
        if !worth_it {
            return None;
        }
        let (request, dropped) = requests.build(plan, None).await;
        speculation_outcome(app, "started");
        Some(Guess {
            plan: plan.clone(),
            request,
            dropped,
        })
    }

    /// Records the plan the turn decided and how its guess fared; the write runs on the
    /// turns' tracker, off the turn's path.
    pub(super) fn record_plan(
        &self,
        known: Option<&Snapshot>,
        plan: &MainPlan,
        hit: Option<bool>,
        speculated: bool,
    ) {
        let Some(known) = known else { return };
        let app = self.deps.as_ref();
        let write = app
            .predictions
            .remember(&self.owner, self.chat, known, plan, hit, speculated);
        app.tasks.spawn(write);
    }
}

/// The chat's key for a provider's prompt cache: a hash of the owner's hash and the chat
/// id, so the provider can group a chat's requests without learning either.
fn prompt_cache_key(owner: &UserHash, chat: &ChatId) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(owner.as_str())
        .chain_update(b"/")
        .chain_update(chat.as_str())
        .finalize();
    hex::encode(&digest[..16])
}

/// The end user as a provider's `user` field sees it (sent only with `llm.send_user`): a
/// hash of the owner's hash, stable per user, naming neither the user nor a cache key.
fn provider_user(owner: &UserHash) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(b"chatd-llm-user:")
        .chain_update(owner.as_str())
        .finalize();
    hex::encode(&digest[..16])
}
