//! The second stage: the turn's tools, preprocessing with the speculative main call beside
//! it (see [`crate::pipeline::speculation`]), the settings/memories the answer needs, the
//! main request, and the `preprocessing_step` and `ai_typing_started` frames. The main call
//! waits only for preprocessing's decision fields ([`crate::pipeline::preprocess`]); the
//! rest of its reply is handed on to the answer stage.

use futures_util::future::BoxFuture;

use super::Turn;
use super::prepare::Ready;
use super::speculate::{Guess, Requests};
use super::steps::steps;
use super::tools::TurnTools;
use crate::delivery::Audience;
use crate::delivery::frames::Notice;
use crate::inbound::MessageOptions;
use crate::llm::LlmRequest;
use crate::memories::recall::{self as memories, Recalled};
use crate::metrics::StageLabel;
use crate::pipeline::context::MainPlan;
use crate::pipeline::preprocess::{self, Decided, Preprocessed};
use crate::pipeline::speculation::{self, Early, Recall};
use crate::pipeline::tools::ToolRunner;
use crate::pipeline::{TurnContext, TurnEvent, TurnSink, Typing};
use crate::turn::report::speculation_outcome;

/// What the plan stage decided.
pub(in crate::turn) struct Plan<'p> {
    /// Preprocessing's decision (the whole reply when it came in one piece).
    pub(in crate::turn) pre: Preprocessed,
    /// The rest of preprocessing's reply, when the answer starts before it.
    pub(in crate::turn) rest: Option<BoxFuture<'p, Preprocessed>>,
    pub(in crate::turn) plan: MainPlan,
    /// The main request and how many history messages it left out (`None`: refused or
    /// cancelled).
    pub(in crate::turn) main: Option<(LlmRequest, usize)>,
    /// The speculative main call, when it was kept.
    pub(in crate::turn) early: Option<Early<'static>>,
    pub(in crate::turn) ctx: TurnContext,
}

impl Turn<'_> {
    pub(in crate::turn) async fn plan<'p>(
        &'p self,
        ready: &'p Ready,
        recent: &'p [String],
        turn_tools: &'p TurnTools,
        tools: &'p dyn ToolRunner,
        record: Option<Recall>,
    ) -> Plan<'p> {
        let app = self.deps.as_ref();
        let stage = preprocess::Stage {
            instructions: &app.instructions,
            models: &ready.models,
            tools,
            config: &app.pipeline,
        };
        let input = self.preprocess_input(ready, recent);
        let active_focus = turn_tools.focus.active_id();
        let caution = app.pipeline.injection_caution_threshold;
        let requests = self.requests(tools, ready);
        // The guess is made (and scored) even when no call is opened for it.
        let known = self.known(record).await;
        let guessed = self.guess(known.as_ref(), ready, active_focus, || {
            MainPlan::new(&stage.unremarkable(&input), active_focus, caution)
        });
        let guess = self
            .speculate(known.as_ref(), guessed.as_ref(), &requests)
            .await;
        let side = guess.as_ref().map(|g| {
            let (client, request) = (g.plan.model.client.clone(), g.request.clone());
            Box::pin(async move { client.stream(request).await }) as BoxFuture<'static, _>
        });
        let cancel = &self.ticket.cancel;
        let (decided, early) =
            speculation::alongside(stage.start(input, cancel).decide(), side).await;
        let (pre, rest) = match decided {
            Decided::Whole(pre) => (pre, None),
            Decided::Early { decision, rest } => (decision, Some(rest)),
        };
        self.count_degraded(&pre);
        let mut plan = MainPlan::new(&pre, active_focus, caution);
        // Settings/memories: cached entries join the prompt as data, missing ones are asked
        // for without waiting, and the relevant categories' proposal tools are offered.
        let relevant: &[String] = match pre.rejection {
            None if !cancel.is_cancelled() => &pre.settings_memories,
            _ => &[],
        };
        let recalled = self.recall(relevant).await;
        plan.skills.extend(turn_tools.proposals.offer(relevant));
        let proceed = !cancel.is_cancelled() && pre.rejection.is_none();
        // The early call is kept only for the very request preprocessing decided (never when
        // settings/memories shape it: its data block and proposal tools came after the guess).
        let hit = |guessed: &MainPlan| *guessed == plan && relevant.is_empty();
        if proceed && !pre.degraded {
            let scored = guessed.as_ref().map(hit);
            self.record_plan(known.as_ref(), &plan, scored, guess.is_some());
        }
        let kept = guess.as_ref().is_some_and(|g| proceed && hit(&g.plan));
        let confirmed = proceed.then_some((&plan, &recalled));
        let (main, early) = self
            .main_call(guess, early, kept, confirmed, &requests)
            .await;
        self.count_main(main.as_ref());
        let ctx = self.context(&pre, ready);
        // The rest of preprocessing is waited for only beside an answer (a refusal or a
        // cancel hangs up on it); the title then follows when it is written.
        let rest = rest.filter(|_| proceed);
        self.announce(&ctx, &pre, ready, rest.is_some());
        Plan {
            pre,
            rest,
            plan,
            main,
            early,
            ctx,
        }
    }

    /// The relevant settings/memories entries the chat's cache holds; the missing ones are
    /// asked for from every device without waiting.
    async fn recall(&self, relevant: &[String]) -> Recalled {
        let recalled = memories::recall(&self.deps.memories, &self.memory_turn(), relevant).await;
        if let Some(request) = recalled.request.clone() {
            let notice = Notice::NeedSettingsMemories(request);
            self.writer.notice(Audience::All, notice);
        }
        recalled
    }

    fn count_degraded(&self, pre: &Preprocessed) {
        if pre.degraded {
            let stage = "preprocessing";
            let failures = &self.deps.metrics.stage_failures;
            failures.get_or_create(&StageLabel { stage }).inc();
        }
    }

    /// What preprocessing reads of the turn (and the user's other recent chats' summaries).
    fn preprocess_input<'r>(
        &self,
        ready: &'r Ready,
        recent: &'r [String],
    ) -> preprocess::Input<'r> {
        let memories = &self.deps.memories;
        let opts = &ready.opts;
        preprocess::Input {
            history: &ready.history,
            first_message: ready.first_message,
            pinned_model: opts.pinned_model.as_deref(),
            connected_accounts: &opts.connected_accounts,
            settings_saved: saved_categories(&memories.categories, opts),
            settings_categories: memories.categories.keys(),
            recent_summaries: recent,
        }
    }

    /// The main request: the speculative call's when it is `kept`, else one built now for
    /// the `confirmed` plan (none for a refusal or a cancel); the early stream goes with it.
    async fn main_call(
        &self,
        guess: Option<Guess>,
        early: Option<Early<'static>>,
        kept: bool,
        confirmed: Option<(&MainPlan, &Recalled)>,
        requests: &Requests<'_>,
    ) -> (Option<(LlmRequest, usize)>, Option<Early<'static>>) {
        match guess {
            Some(g) if kept => {
                self.speculation("used");
                (Some((g.request, g.dropped)), early)
            }
            wasted => {
                self.waste(wasted, early);
                let main = match confirmed {
                    Some((plan, recalled)) => Some(requests.build(plan, Some(recalled)).await),
                    None => None,
                };
                (main, None)
            }
        }
    }

    /// The speculative call was not kept (or none was made): its input tokens are counted
    /// as wasted, and the early stream is closed at once.
    fn waste(&self, wasted: Option<Guess>, early: Option<Early<'static>>) {
        let metrics = &self.deps.metrics;
        match wasted {
            Some(g) => {
                let tokens = g.request.estimated_input_tokens();
                metrics.speculative_wasted_input_tokens.inc_by(tokens);
                metrics.main_call_input_tokens.inc_by(tokens);
                self.speculation("wasted");
            }
            None => self.writer.speculation("off"),
        }
        drop(early);
    }

    /// Labels the turn's first token and counts what became of its speculative call.
    fn speculation(&self, outcome: &'static str) {
        speculation_outcome(self.deps, outcome);
        self.writer.speculation(outcome);
    }

    /// The main call's input tokens and how long the turn took to decide it.
    fn count_main(&self, main: Option<&(LlmRequest, usize)>) {
        let Some((request, _)) = main else { return };
        let metrics = &self.deps.metrics;
        metrics
            .main_call_input_tokens
            .inc_by(request.estimated_input_tokens());
        metrics
            .main_call_decision_seconds
            .observe(self.started.elapsed().as_secs_f64());
    }

    /// The answer's context: the model and category preprocessing chose.
    fn context(&self, pre: &Preprocessed, ready: &Ready) -> TurnContext {
        let opts = &ready.opts;
        TurnContext {
            user: self.user.clone(),
            chat_id: self.chat.clone(),
            task_id: self.ticket.task_id.clone(),
            user_message_id: self.ticket.user_message_id.clone(),
            model_name: pre.choice.model.spec.id.clone(),
            category: Some(pre.category.clone()),
            connected_accounts: opts.connected_accounts.clone(),
            privacy: ready.privacy.clone(),
        }
    }

    /// The `preprocessing_step` frames and `ai_typing_started` (without the title while it
    /// is still being written).
    fn announce(&self, ctx: &TurnContext, pre: &Preprocessed, ready: &Ready, title_late: bool) {
        let sink: &dyn TurnSink = self.writer.as_ref();
        for step in steps(pre, ready.first_message, ready.has_title, title_late) {
            sink.emit(ctx, TurnEvent::Step(step));
        }
        let typing = Typing {
            title: pre.title.clone().filter(|_| !title_late),
            icon_names: pre.icon_names.clone(),
            encrypted_chat_key: ready.opts.encrypted_chat_key.clone(),
        };
        sink.emit(ctx, TurnEvent::Typing(typing));
    }

    /// The turn as settings/memories recall sees it: its owner, chat, message and the text
    /// of its newest user message.
    fn memory_turn(&self) -> memories::Turn<'_> {
        memories::Turn {
            user: &self.owner,
            chat: self.chat,
            message_id: &self.ticket.user_message_id,
            text: self
                .ticket
                .inbound
                .last()
                .map(|i| i.message.content.as_str())
                .unwrap_or_default(),
        }
    }
}

/// The settings/memories categories the user has saved entries of (`app_id-item_key`
/// entries the client lists), or every category when the client does not say.
fn saved_categories(
    categories: &crate::memories::Categories,
    opts: &MessageOptions,
) -> Vec<String> {
    let Some(saved) = &opts.settings_available else {
        return categories.keys();
    };
    let mut keys: Vec<String> = saved
        .iter()
        .filter_map(|k| categories.get(k).map(|c| c.key()))
        .collect();
    keys.sort();
    keys.dedup();
    keys
}
