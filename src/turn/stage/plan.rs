//! The second stage: the turn's tools, preprocessing with the speculative main call beside
//! it (see [`crate::pipeline::speculation`]), the settings/memories the answer needs, the
//! main request, and the `preprocessing_step` and `ai_typing_started` frames. The main call
//! waits only for preprocessing's decision fields ([`crate::pipeline::preprocess`]); the
//! rest of its reply is handed on to the answer stage.

use chatd_protocol::{ChatId, PreprocessingStepKind};
use futures_util::future::BoxFuture;
use serde_json::json;

use super::Turn;
use super::prepare::Ready;
use crate::clock;
use crate::config::Speculation;
use crate::crypto::UserHash;
use crate::delivery::Audience;
use crate::focus::FocusTools;
use crate::llm::LlmRequest;
use crate::memories::recall as memories;
use crate::memories::tools::ProposalTools;
use crate::metrics::StageLabel;
use crate::pipeline::context::{self, MainPlan};
use crate::pipeline::preprocess::{self, Decided, Preprocessed, step_data};
use crate::pipeline::speculation::{self, Early};
use crate::pipeline::tools::{SwitchedOff, ToolRunner, ToolSet};
use crate::pipeline::{StepEvent, TurnContext, TurnEvent, TurnSink, Typing};
use crate::turn::report::speculation_outcome;

/// The per-turn tools of other owners than the skills: the chat's focus mode and the
/// settings/memories proposals (they join the skills in [`TurnTools::set`]).
pub(in crate::turn) struct TurnTools {
    focus: FocusTools,
    proposals: ProposalTools,
    /// What the user switched off (`set_app_preferences`).
    off: SwitchedOff,
}

impl TurnTools {
    pub(in crate::turn) async fn new(turn: &Turn<'_>, ready: &Ready) -> Self {
        let app = turn.deps;
        // The chat's focus mode: the server's record, or the client's seed.
        let active = crate::focus::active_for_turn(
            &app.focus,
            &app.ai_cache,
            &turn.owner,
            turn.chat,
            ready.opts.active_focus_id.as_deref(),
        )
        .await;
        let off = match app.ai_cache.app_preferences(&turn.owner).await {
            Ok(Some(p)) => SwitchedOff::new(p.disabled_apps, p.disabled_skills),
            Ok(None) => SwitchedOff::default(),
            Err(e) => {
                tracing::warn!(error = %e, "app preferences unavailable; every app is offered");
                SwitchedOff::default()
            }
        };
        // A focus mode of an app the user switched off is not applied.
        let active = active.filter(|mode| off.allows(&mode.id));
        Self {
            focus: FocusTools::new(app.focus.clone(), active, app.ai_cache.clone()),
            proposals: ProposalTools::new(app.memories.clone()),
            off,
        }
    }

    /// Every tool the turn may offer: the skills, the routines, focus and proposals.
    pub(in crate::turn) fn set<'t>(&'t self, turn: &'t Turn<'_>) -> ToolSet<'t> {
        ToolSet::new(vec![
            turn.deps.skills.as_ref() as &dyn ToolRunner,
            &turn.deps.routines,
            &self.focus,
            &self.proposals,
        ])
        .without(self.off.clone())
    }
}

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
        turn_tools: &'p TurnTools,
        tools: &'p dyn ToolRunner,
    ) -> Plan<'p> {
        let (app, ticket, chat) = (self.deps.as_ref(), self.ticket, self.chat);
        let opts = &ready.opts;
        let stage = preprocess::Stage {
            instructions: &app.instructions,
            models: &app.models,
            tools,
            config: &app.pipeline,
        };
        let input = preprocess::Input {
            history: &ready.history,
            first_message: ready.first_message,
            pinned_model: opts.pinned_model.as_deref(),
            connected_accounts: &opts.connected_accounts,
            settings_saved: saved_categories(&app.memories.categories, opts),
            settings_categories: app.memories.categories.keys(),
        };
        let active_focus = turn_tools.focus.active_id();
        let caution = app.pipeline.injection_caution_threshold;
        let datetime = clock::now_rfc3339();
        // The early call and the confirmed one alike ask for at most `max_output_tokens`,
        // and carry the chat's prompt-cache key.
        let cache_key = prompt_cache_key(&self.owner, chat);
        let main_request = |plan: MainPlan| {
            let (cache_key, datetime) = (cache_key.clone(), &datetime);
            async move {
                let (mut request, dropped) = context::main_request(
                    &app.instructions,
                    tools,
                    &plan,
                    &ready.history,
                    datetime,
                    app.pipeline.answer_reserve_tokens,
                )
                .await;
                request.max_tokens = Some(app.max_output_tokens);
                request.cache_key = Some(cache_key);
                (request, dropped)
            }
        };
        // The likely main call goes out while preprocessing runs; `auto` speculates for a
        // metered model only while the chat's guesses hit often enough. The guess is made
        // (and scored) even when no call is opened for it.
        let mode = app.pipeline.speculative_main_call;
        let guessed = (mode != Speculation::Off).then(|| {
            let pinned = opts
                .pinned_model
                .as_deref()
                .and_then(|id| app.models.get(id));
            app.predictions.guess(chat, pinned, active_focus, || {
                MainPlan::new(&stage.unremarkable(&input), active_focus, caution)
            })
        });
        let speculate = guessed.as_ref().is_some_and(|plan| {
            mode == Speculation::On
                || !plan.model.client.is_metered()
                || app
                    .predictions
                    .worth_it(chat, app.pipeline.speculation_budget)
        });
        let guess = match &guessed {
            Some(plan) if speculate => {
                let (request, dropped) = main_request(plan.clone()).await;
                speculation_outcome(app, "started");
                Some((plan.clone(), request, dropped))
            }
            _ => None,
        };
        let side = guess.as_ref().map(|(plan, request, _)| {
            let (client, request) = (plan.model.client.clone(), request.clone());
            Box::pin(async move { client.stream(request).await }) as BoxFuture<'static, _>
        });
        let (decided, early) =
            speculation::alongside(stage.start(input, &ticket.cancel).decide(), side).await;
        let (pre, rest) = match decided {
            Decided::Whole(pre) => (pre, None),
            Decided::Early { decision, rest } => (decision, Some(rest)),
        };
        if pre.degraded {
            app.metrics
                .stage_failures
                .get_or_create(&StageLabel {
                    stage: "preprocessing",
                })
                .inc();
        }
        let mut plan = MainPlan::new(&pre, active_focus, caution);
        // Settings/memories: cached entries join the prompt as data, missing ones are asked
        // for without waiting, and the relevant categories' proposal tools are offered.
        let relevant: &[String] = match pre.rejection {
            None if !ticket.cancel.is_cancelled() => &pre.settings_memories,
            _ => &[],
        };
        let recalled = memories::recall(&app.memories, &self.memory_turn(), relevant).await;
        if let Some(request) = recalled.request.clone() {
            self.writer.frame(
                Audience::All,
                chatd_protocol::ServerMessage::RequestAppSettingsMemories(request),
            );
        }
        plan.skills.extend(turn_tools.proposals.offer(relevant));
        let proceed = !ticket.cancel.is_cancelled() && pre.rejection.is_none();
        // The early call is kept only for the very request preprocessing decided (never when
        // settings/memories shape it: its data block and proposal tools came after the guess).
        let hit = |guessed: &MainPlan| *guessed == plan && relevant.is_empty();
        if proceed && !pre.degraded {
            let scored = guessed.as_ref().map(hit);
            app.predictions
                .remember(chat, plan.clone(), scored, guess.is_some());
        }
        let (main, early) = match guess {
            Some((guessed, request, dropped)) if proceed && hit(&guessed) => {
                speculation_outcome(app, "used");
                self.writer.speculation("used");
                (Some((request, dropped)), early)
            }
            other => {
                if let Some((_, wasted, _)) = &other {
                    speculation_outcome(app, "wasted");
                    let tokens = wasted.estimated_input_tokens();
                    app.metrics.speculative_wasted_input_tokens.inc_by(tokens);
                    app.metrics.main_call_input_tokens.inc_by(tokens);
                }
                self.writer
                    .speculation(if other.is_some() { "wasted" } else { "off" });
                drop(early);
                let main = if proceed {
                    let (mut request, dropped) = main_request(plan.clone()).await;
                    recalled.decorate(&mut request);
                    Some((request, dropped))
                } else {
                    None
                };
                (main, None)
            }
        };
        if let Some((request, _)) = &main {
            app.metrics
                .main_call_input_tokens
                .inc_by(request.estimated_input_tokens());
            app.metrics
                .main_call_decision_seconds
                .observe(self.started.elapsed().as_secs_f64());
        }
        let ctx = TurnContext {
            user: self.user.clone(),
            chat_id: chat.clone(),
            task_id: ticket.task_id.clone(),
            user_message_id: ticket.user_message_id.clone(),
            model_name: pre.choice.model.spec.id.clone(),
            category: Some(pre.category.clone()),
            connected_accounts: opts.connected_accounts.clone(),
        };
        // The rest of preprocessing is waited for only beside an answer (a refusal or a
        // cancel hangs up on it); the title then follows when it is written.
        let rest = rest.filter(|_| proceed);
        let title_late = rest.is_some();
        let sink: &dyn TurnSink = self.writer.as_ref();
        for step in steps(&pre, ready.first_message, ready.has_title, title_late) {
            sink.emit(&ctx, TurnEvent::Step(step));
        }
        sink.emit(
            &ctx,
            TurnEvent::Typing(Typing {
                title: pre.title.clone().filter(|_| !title_late),
                icon_names: pre.icon_names.clone(),
                encrypted_chat_key: opts.encrypted_chat_key.clone(),
            }),
        );
        Plan {
            pre,
            rest,
            plan,
            main,
            early,
            ctx,
        }
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
    opts: &crate::inbound::MessageOptions,
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

/// The `preprocessing_step` frames of a turn, in order: the title (unless `title_late`: it
/// is still being written, see [`title_step`]), the mate, the model.
fn steps(
    pre: &Preprocessed,
    first_message: bool,
    has_title: bool,
    title_late: bool,
) -> Vec<StepEvent> {
    let mate = StepEvent {
        step: PreprocessingStepKind::MateSelected,
        skip_reason: None,
        data: step_data(&[("category", json!(pre.category)), ("mate", json!(pre.mate))]),
    };
    let model = StepEvent {
        step: PreprocessingStepKind::ModelSelected,
        skip_reason: None,
        data: step_data(&[
            ("model_id", json!(pre.choice.model.spec.id)),
            ("model_name", json!(pre.choice.model.spec.name)),
            ("selection_reason", json!(pre.choice.reason)),
        ]),
    };
    match title_late {
        true => vec![mate, model],
        false => vec![title_step(pre, first_message, has_title), mate, model],
    }
}

/// The `title_generated` step: the title, icons and category, or why there is none.
pub(super) fn title_step(pre: &Preprocessed, first_message: bool, has_title: bool) -> StepEvent {
    match (&pre.title, first_message) {
        (Some(title), true) => StepEvent {
            step: PreprocessingStepKind::TitleGenerated,
            skip_reason: None,
            data: step_data(&[
                ("title", json!(title)),
                ("icon_names", json!(pre.icon_names)),
                ("category", json!(pre.category)),
            ]),
        },
        _ => StepEvent {
            step: PreprocessingStepKind::TitleGenerated,
            skip_reason: Some(
                if has_title {
                    "chat already has a title"
                } else if first_message {
                    "no title was generated"
                } else {
                    "not the first message"
                }
                .into(),
            ),
            data: json!({}),
        },
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
