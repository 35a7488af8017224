//! Runs a chat's turns on the turn tracker: prepare the history (or ask the client for it),
//! preprocess (steps, title, model; or refuse) while the likely main call is opened
//! alongside ([`crate::pipeline::speculation`]), stream the answer with its tool loop,
//! repair broken links, seal it into the AI cache, emit the final frame, start
//! postprocessing ([`super::stages`]), then run the turn for messages queued meanwhile.
//! Every frame goes through the turn's [`TurnWriter`].

mod report;

pub(crate) use report::fault_message;
use report::{reason_label, refuse, speculation_outcome};

use std::sync::Arc;
use std::time::Instant;

use chatd_protocol::{AiTaskInitiated, ChatId, ErrorCode, ServerMessage};

use super::TurnTicket;
use super::correction::Reprocess;
use super::deps::TurnDeps;
use super::stages::{
    PostJob, Settled, reject, remember_answer, repair_links, run_postprocessing, settle_messages,
    steps, title_step,
};
use super::writer::{TurnKey, TurnWriter};
use crate::auth::UserId;
use crate::clock;
use crate::config::Speculation;
use crate::crypto::UserHash;
use crate::delivery::Audience;
use crate::history::{self, Prepared};
use crate::memories::recall as memories;
use crate::memories::tools::ProposalTools;
use crate::metrics::StageLabel;
use crate::metrics::{OutcomeLabel, ReasonLabel};
use crate::pipeline::answer::{AnswerLimits, AnswerStream, ParagraphHook};
use crate::pipeline::context::MainPlan;
use crate::pipeline::preprocess::{self, Decided};
use crate::pipeline::speculation;
use crate::pipeline::tools::{ToolRunner, ToolSet};
use crate::pipeline::{
    HistoryRole, Interruption, TurnContext, TurnEvent, TurnOutcome, TurnSink, Typing, context,
};

/// Runs the chat's turn and then those queued behind it, on the turn tracker.
pub fn spawn(deps: Arc<TurnDeps>, user: UserId, chat: ChatId, ticket: TurnTicket) {
    let tracker = deps.tasks.clone();
    tracker.spawn(run_turns(deps, user, chat, ticket));
}

async fn run_turns(deps: Arc<TurnDeps>, user: UserId, chat: ChatId, mut ticket: TurnTicket) {
    // While a turn of the user runs here, this node hears the user's channel (cancel_skill).
    let owner = UserHash::of(&user);
    deps.delivery.hold(&owner).await;
    loop {
        // The lease is renewed while the turn runs; a cancel requested on another node
        // arrives with a renewal.
        tokio::select! {
            () = run_ticket(&deps, &user, &chat, &ticket) => {}
            () = keep_lease(&deps, &ticket) => {}
        }
        match deps.turns.finish(&ticket, &deps.shutdown).await {
            Some(next) => ticket = next,
            None => break,
        }
    }
    deps.delivery.release(&owner).await;
}

/// The ticket's follow-up messages, then the answer to its messages.
async fn run_ticket(deps: &Arc<TurnDeps>, user: &UserId, chat: &ChatId, ticket: &TurnTicket) {
    super::follow_up::deliver(deps, user, chat, ticket).await;
    if !ticket.inbound.is_empty() {
        run_one(deps, user, chat, ticket).await;
    }
}

/// Renews the ticket's lease every third of its length until the turn ends (returns only
/// when the lease is lost and the turn was told to stop; the turn then ends on its own).
async fn keep_lease(deps: &TurnDeps, ticket: &TurnTicket) {
    let every = deps.turns.lease / 3;
    loop {
        tokio::time::sleep(every).await;
        if !deps.turns.renew(ticket).await {
            std::future::pending::<()>().await;
        }
    }
}

#[tracing::instrument(skip_all, fields(chat_id = %chat, task_id = %ticket.task_id))]
async fn run_one(deps: &Arc<TurnDeps>, user: &UserId, chat: &ChatId, ticket: &TurnTicket) {
    let app = deps.as_ref();
    let started = Instant::now();
    let owner = UserHash::of(user);
    let key = TurnKey {
        owner: owner.clone(),
        chat: chat.clone(),
        task: ticket.task_id.clone(),
        generation: ticket.lease.generation,
    };
    let writer = TurnWriter::new(deps.clone(), key);
    writer.time_first_chunk(started);
    let requesters = Audience::Only(ticket.requesters.clone());
    let prepared = tokio::select! {
        biased;
        _ = ticket.cancel.cancelled() => return,
        p = history::prepare(&app.ai_cache, &app.history_requests, &owner, chat, &ticket.inbound) => p,
    };
    let history = match prepared {
        Ok(Prepared::Ready(history)) => history,
        Ok(Prepared::NeedHistory(request)) => {
            app.metrics
                .history_requests
                .get_or_create(&ReasonLabel {
                    reason: reason_label(request.reason),
                })
                .inc();
            // Recorded first: the copy with the history may come back at once.
            settle_messages(app, &owner, chat, ticket, Settled::AwaitingHistory).await;
            writer.frame(requesters, ServerMessage::RequestChatHistory(request));
            return;
        }
        Ok(Prepared::NeedEmbeds(request)) => {
            app.metrics
                .history_requests
                .get_or_create(&ReasonLabel {
                    reason: "missing_embeds",
                })
                .inc();
            // Like a history request: the copy with the embeds may come back at once.
            settle_messages(app, &owner, chat, ticket, Settled::AwaitingHistory).await;
            writer.frame(requesters, ServerMessage::RequestChatEmbeds(request));
            return;
        }
        Ok(Prepared::Invalid(reason)) => {
            settle_messages(app, &owner, chat, ticket, Settled::Unanswered).await;
            return refuse(
                app,
                &writer,
                chat,
                ticket,
                ErrorCode::InvalidChatHistory,
                reason,
            );
        }
        Err(fault) => {
            tracing::warn!(error = %fault, "history unavailable; turn not started");
            let (code, text) = fault_message(&fault);
            settle_messages(app, &owner, chat, ticket, Settled::Unanswered).await;
            return refuse(app, &writer, chat, ticket, code, text);
        }
    };

    // A routine waiting in this chat takes the message as its answer.
    if super::routine::answer(app, user, chat, ticket, &writer).await {
        settle_messages(app, &owner, chat, ticket, Settled::Answered).await;
        writer.flushed().await;
        return;
    }
    let initiated = ServerMessage::AiTaskInitiated(AiTaskInitiated {
        chat_id: chat.clone(),
        user_message_id: ticket.user_message_id.clone(),
        ai_task_id: ticket.task_id.clone(),
        status: "processing_started".into(),
    });
    writer.frame(requesters, initiated);
    let opts = ticket
        .inbound
        .last()
        .map(|i| i.options.clone())
        .unwrap_or_default();
    let has_title = ticket
        .inbound
        .iter()
        .any(|i| i.message.chat_has_title || i.message.current_chat_title.is_some());
    let new_messages = ticket.inbound.len();
    let first_message = !has_title
        && ticket
            .inbound
            .first()
            .is_some_and(|i| i.prior_messages == 0)
        && history.len() <= new_messages;

    // The chat's focus mode: the server's record, or the client's seed (see `crate::focus`).
    let focus = crate::focus::FocusTools::new(
        app.focus.clone(),
        crate::focus::active_for_turn(
            &app.focus,
            &app.ai_cache,
            &owner,
            chat,
            opts.active_focus_id.as_deref(),
        )
        .await,
        app.ai_cache.clone(),
        app.delivery.clone(),
    );
    // Per-turn tools of other owners join the skills here (see `ToolSet`).
    let proposals = ProposalTools::new(app.memories.clone(), app.delivery.clone());
    let tool_set = ToolSet::new(vec![
        app.skills.as_ref() as &dyn ToolRunner,
        &app.routines,
        &focus,
        &proposals,
    ]);
    let tools: &dyn ToolRunner = &tool_set;
    let stage = preprocess::Stage {
        instructions: &app.instructions,
        models: &app.models,
        tools,
        config: &app.pipeline,
    };
    let input = preprocess::Input {
        history: &history,
        first_message,
        pinned_model: opts.pinned_model.as_deref(),
        connected_accounts: &opts.connected_accounts,
        settings_available: &opts.settings_available,
        settings_categories: &app.memories.categories.keys(),
    };
    let active_focus = focus.active_id();
    let caution = app.pipeline.injection_caution_threshold;
    let datetime = clock::now_rfc3339();
    let (history, datetime) = (&history, &datetime);
    // The early call and the confirmed one alike ask for at most `max_output_tokens`, and
    // carry the chat's prompt-cache key.
    let cache_key = prompt_cache_key(&owner, chat);
    let main_request = |plan: MainPlan| {
        let cache_key = cache_key.clone();
        async move {
            let (mut request, dropped) = context::main_request(
                &app.instructions,
                tools,
                &plan,
                history,
                datetime,
                app.pipeline.answer_reserve_tokens,
            )
            .await;
            request.max_tokens = Some(app.max_output_tokens);
            request.cache_key = Some(cache_key);
            (request, dropped)
        }
    };
    // The likely main call goes out while preprocessing runs (see `pipeline::speculation`);
    // `auto` speculates for a metered model only while the chat's guesses hit often enough.
    // The guess is made (and scored) even when no call is opened for it.
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
    let guess_client = guess.as_ref().map(|(plan, ..)| plan.model.client.clone());
    let side = guess_client
        .as_ref()
        .zip(guess.as_ref())
        .map(|(client, (_, request, _))| client.stream(request.clone()));
    // The main call waits only for preprocessing's decision fields (see
    // `pipeline::preprocess::early`); the title and the rest arrive beside the answer.
    let (decided, early) =
        speculation::alongside(stage.start(&input, &ticket.cancel).decide(), side).await;
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
    let recalled =
        memories::recall(&app.memories, &memory_turn(&owner, chat, ticket), relevant).await;
    if let Some(request) = recalled.request.clone() {
        writer.frame(
            Audience::All,
            ServerMessage::RequestAppSettingsMemories(request),
        );
    }
    plan.skills.extend(proposals.offer(relevant));
    let proceed = !ticket.cancel.is_cancelled() && pre.rejection.is_none();
    // The early call is kept only for the very request preprocessing decided (never when
    // settings/memories shape it: its data block and proposal tools came after the guess).
    let hit = |guessed: &MainPlan| *guessed == plan && relevant.is_empty();
    if proceed && !pre.degraded {
        let scored = guessed.as_ref().map(hit);
        app.predictions.remember(chat, plan.clone(), scored);
    }
    let ctx = TurnContext {
        user: user.clone(),
        chat_id: chat.clone(),
        task_id: ticket.task_id.clone(),
        user_message_id: ticket.user_message_id.clone(),
        model_name: pre.choice.model.spec.id.clone(),
        category: Some(pre.category.clone()),
        connected_accounts: opts.connected_accounts.clone(),
    };
    let sink: Arc<dyn TurnSink> = writer.clone();
    let sink = &sink;
    // The rest of preprocessing is waited for only beside an answer (a refusal or a cancel
    // hangs up on it); the title then follows when it is written.
    let rest = rest.filter(|_| proceed);
    let title_late = rest.is_some();
    for step in steps(&pre, first_message, has_title, title_late) {
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
    let rest = async {
        let whole = rest?.await;
        let title = title_step(&whole, first_message, has_title);
        sink.emit(&ctx, TurnEvent::Step(title));
        Some(whole)
    };
    let reason = || ticket.interruption();
    let links = app.links.as_ref().map(|c| c.answer());
    let (main, early) = match guess {
        Some((guessed, request, dropped)) if proceed && hit(&guessed) => {
            speculation_outcome(app, "used");
            writer.speculation("used");
            (Some((request, dropped)), early)
        }
        other => {
            if let Some((_, wasted, _)) = &other {
                speculation_outcome(app, "wasted");
                let tokens = wasted.estimated_input_tokens();
                app.metrics.speculative_wasted_input_tokens.inc_by(tokens);
                app.metrics.main_call_input_tokens.inc_by(tokens);
            }
            writer.speculation(if other.is_some() { "wasted" } else { "off" });
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
            .observe(started.elapsed().as_secs_f64());
    }
    // The answer (with the context it was written in, kept for reprocessing, see `stages`),
    // beside the rest of preprocessing.
    let answer = async {
        match main {
            Some((request, dropped)) if !ticket.cancel.is_cancelled() => {
                let (mut outcome, request) = AnswerStream {
                    llm: plan.model.client.as_ref(),
                    sink,
                    ctx: &ctx,
                    cancel: &ticket.cancel,
                    cancel_reason: &reason,
                    tools: Some(tools),
                    max_rounds: app.pipeline.max_tool_rounds,
                    paragraphs: links.as_ref().map(|l| l as &dyn ParagraphHook),
                    limits: AnswerLimits {
                        max_output_tokens: app.max_output_tokens,
                        deadline: tokio::time::Instant::from_std(started)
                            + app.pipeline.turn_deadline,
                    },
                }
                .run(request, early)
                .await;
                outcome.trimmed_history = dropped;
                (outcome, Some(request))
            }
            _ => match pre.rejection {
                Some(rejection) if !ticket.cancel.is_cancelled() => {
                    (reject(app, sink.as_ref(), &ctx, rejection), None)
                }
                _ => (
                    TurnOutcome {
                        interrupted: Some(ticket.interruption()),
                        ..TurnOutcome::default()
                    },
                    None,
                ),
            },
        }
    };
    let ((mut outcome, answered_from), whole) = tokio::join!(answer, rest);
    let whole = whole.as_ref().unwrap_or(&pre);
    if let Some(links) = links {
        repair_links(
            app,
            sink.as_ref(),
            &ctx,
            &ticket.cancel,
            links,
            &mut outcome,
        )
        .await;
    }
    let answered = !outcome.text.trim().is_empty() && !ticket.abandoned();
    if answered {
        remember_answer(app, &owner, &ctx, &outcome.text, &ticket.requesters).await;
    }
    let settled = if answered {
        Settled::Answered
    } else {
        Settled::Unanswered
    };
    settle_messages(app, &owner, chat, ticket, settled).await;
    let label = match (&outcome.interrupted, &outcome.error, &outcome.rejection) {
        (Some(Interruption::Cancelled), _, _) => "cancelled",
        (Some(Interruption::Shutdown), _, _) => "shutdown",
        (None, Some(_), _) => "error",
        (None, None, Some(_)) => "rejected",
        (None, None, None) => "completed",
    };
    if let Some(e) = &outcome.error {
        tracing::warn!(error = %e, "turn ended with an error");
    }
    let postprocess = label == "completed" && app.pipeline.postprocessing;
    let answer = outcome.text.clone();
    sink.emit(&ctx, TurnEvent::Finished(outcome));
    app.metrics
        .turns
        .get_or_create(&OutcomeLabel { outcome: label })
        .inc();
    app.metrics
        .turn_seconds
        .observe(started.elapsed().as_secs_f64());
    if postprocess {
        let user_message = history
            .iter()
            .rev()
            .find(|h| h.role == HistoryRole::User)
            .map(|h| h.content.clone())
            .unwrap_or_default();
        let mut tags = opts.chat_tags.clone();
        for t in &whole.tags {
            if !tags.contains(t) {
                tags.push(t.clone());
            }
        }
        let job = PostJob {
            ctx,
            user_message,
            answer,
            previous_summary: opts.chat_summary.clone(),
            tags,
            follow_ups_enabled: opts.follow_ups_enabled,
            skill_suggestions: writer.skill_suggestions(),
            reprocess: answered_from
                .filter(|_| app.pipeline.harmful_response_threshold > 0)
                .map(|request| Reprocess {
                    llm: plan.model.client.clone(),
                    request,
                }),
            new_settings_memories: whole.new_settings_memories.clone(),
        };
        app.tasks
            .spawn(run_postprocessing(deps.clone(), writer.clone(), job));
    }
    // The turn's frames are out (logged and published) before the chat's next turn writes
    // its own: devices on other nodes get them in turn order.
    writer.flushed().await;
}

/// The turn as settings/memories recall sees it: its owner, chat, message and the text of
/// its newest user message.
fn memory_turn<'a>(
    user: &'a UserHash,
    chat: &'a ChatId,
    ticket: &'a TurnTicket,
) -> memories::Turn<'a> {
    memories::Turn {
        user,
        chat,
        message_id: &ticket.user_message_id,
        text: ticket
            .inbound
            .last()
            .map(|i| i.message.content.as_str())
            .unwrap_or_default(),
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
