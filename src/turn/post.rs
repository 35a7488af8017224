//! After the final frame: postprocessing (follow-up suggestions, summary, tags, the answer's
//! harm, suggested settings/memories), run on the turn tracker; and an answer it judged
//! harmful (`harmful_response` at or above `pipeline.harmful_response_threshold`) generated
//! again with a caution (`pipeline::reprocess`), the new text replacing the first
//! everywhere the server holds it (the AI cache, a pending answer) and on every device (one
//! `ai_message_update` with `correction: "harmful_response"` after the final frame, logged
//! like the turn's frames). The turn's follow-up suggestions are withheld then.

use std::sync::Arc;

use super::deps::TurnDeps;
use super::writer::TurnWriter;
use crate::crypto::UserHash;
use crate::llm::{LlmClient, LlmRequest};
use crate::metrics::StageLabel;
use crate::pipeline::answer::AnswerLimits;
use crate::pipeline::function_call::StageError;
use crate::pipeline::{TurnContext, TurnEvent, TurnSink, postprocess, reprocess, summary, tokens};

/// What postprocessing needs after the final frame went out.
pub(in crate::turn) struct PostJob {
    pub(in crate::turn) ctx: TurnContext,
    pub(in crate::turn) user_message: String,
    pub(in crate::turn) answer: Arc<str>,
    pub(in crate::turn) previous_summary: Option<String>,
    pub(in crate::turn) tags: Vec<String>,
    pub(in crate::turn) follow_ups_enabled: bool,
    /// Follow-up suggestions the turn's skills returned (offered first).
    pub(in crate::turn) skill_suggestions: Vec<String>,
    /// The answer's model and context, when a harmful answer may be generated again.
    pub(in crate::turn) reprocess: Option<Reprocess>,
    /// Settings/memories categories worth suggesting a new entry for.
    pub(in crate::turn) new_settings_memories: Vec<String>,
    /// The catalog as the turn reached it (through the chat's pseudonymisation).
    pub(in crate::turn) models: crate::pipeline::models::Models,
    /// The chat's pseudonymisation, saved again if postprocessing met a new value.
    pub(in crate::turn) privacy: Option<Arc<crate::privacy::ChatPrivacy>>,
}

/// Runs postprocessing on the turn tracker (cancelled at shutdown); a failure is logged and
/// counted, never shown as an error: the answer is already delivered.
pub(in crate::turn) async fn run_postprocessing(
    deps: Arc<TurnDeps>,
    writer: Arc<TurnWriter>,
    job: PostJob,
) {
    let input = postprocess::Input {
        user_message: &job.user_message,
        answer: &job.answer,
        previous_summary: job.previous_summary.as_deref(),
        tags: &job.tags,
        follow_ups_enabled: job.follow_ups_enabled,
        skill_suggestions: &job.skill_suggestions,
    };
    let model = job.models.postprocessing();
    match postprocess::run(
        &deps.instructions,
        &model,
        &deps.pipeline,
        &input,
        &deps.shutdown,
    )
    .await
    {
        Ok(mut done) => {
            if deps.pipeline.carry_summary {
                keep_summary(&deps, &job.ctx, &done.chat_summary).await;
            }
            let threshold = deps.pipeline.harmful_response_threshold;
            if threshold > 0 && done.harmful_response >= threshold {
                // Judged harmful: generated again, and no follow-ups to the first answer.
                done.follow_up_request_suggestions.clear();
                if let Some(r) = job.reprocess {
                    replace_harmful_answer(&deps, &writer, &job.ctx, r).await;
                }
            } else {
                let exchange = crate::memories::suggest::Exchange {
                    user: &job.ctx.user,
                    chat: &job.ctx.chat_id,
                    user_message: &job.user_message,
                    answer: &job.answer,
                    candidates: &job.new_settings_memories,
                };
                done.suggested_settings_memories = crate::memories::suggest::run(
                    &deps.memories,
                    &model,
                    deps.pipeline.stage_timeout,
                    &exchange,
                    &deps.shutdown,
                )
                .await;
            }
            let owner = crate::crypto::UserHash::of(&job.ctx.user);
            let privacy = job.privacy.as_deref();
            crate::privacy::save(&deps.ai_cache, &owner, &job.ctx.chat_id, privacy).await;
            writer.emit(&job.ctx, TurnEvent::PostProcessed(done));
        }
        Err(StageError::Cancelled) => {}
        Err(e) => {
            tracing::warn!(error = %e, "postprocessing failed; the answer stands");
            deps.metrics
                .stage_failures
                .get_or_create(&StageLabel {
                    stage: "postprocessing",
                })
                .inc();
        }
    }
}

/// The chat's new summary, kept (sealed, in the AI cache) for its next turns and the
/// user's other chats; before `post_processing_completed`, so the next turn finds it.
async fn keep_summary(deps: &TurnDeps, ctx: &TurnContext, text: &str) {
    let Some(text) = summary::bounded(text, deps.pipeline.summary_max_tokens) else {
        return;
    };
    let owner = UserHash::of(&ctx.user);
    if let Err(e) = deps.ai_cache.set_summary(&owner, &ctx.chat_id, &text).await {
        tracing::warn!(error = %e, "cannot keep the chat's summary");
    }
}

/// What reprocessing needs: the model that answered and the context it answered in.
pub(in crate::turn) struct Reprocess {
    pub(in crate::turn) llm: Arc<dyn LlmClient>,
    pub(in crate::turn) request: LlmRequest,
}

/// Generates the answer again and replaces the first; a failure leaves the first standing.
async fn replace_harmful_answer(
    deps: &TurnDeps,
    writer: &TurnWriter,
    ctx: &TurnContext,
    r: Reprocess,
) {
    let limits = AnswerLimits {
        max_output_tokens: deps.max_output_tokens,
        deadline: tokio::time::Instant::now() + deps.pipeline.turn_deadline,
    };
    let caution = &deps.instructions.prompts.harmful_response_caution;
    let text = match reprocess::regenerate(
        r.llm.as_ref(),
        r.request,
        caution,
        &limits,
        &deps.shutdown,
    )
    .await
    {
        Ok(Some(text)) if !text.trim().is_empty() => text,
        Ok(_) => return,
        Err(e) => {
            tracing::warn!(error = %e, "reprocessing a harmful answer failed; the first stands");
            return;
        }
    };
    deps.metrics.reprocessed_answers.inc();
    let owner = UserHash::of(&ctx.user);
    replace_cached(deps, &owner, ctx, &text).await;
    replace_pending(deps, &owner, ctx, &text).await;
    writer.emit(
        ctx,
        TurnEvent::Corrected {
            text: Arc::from(text),
        },
    );
}

/// The chat's cached copy of the answer (the next turn's history) becomes the new text.
/// Only while it is still the chat's newest message: a turn that came meanwhile appended
/// after it, and writing the list back could lose that turn's messages, so the chat leaves
/// the cache instead (its next turn asks the client for the history, typed).
async fn replace_cached(deps: &TurnDeps, owner: &UserHash, ctx: &TurnContext, text: &str) {
    let id = ctx.assistant_message_id();
    let cache = &deps.ai_cache;
    let mut messages = match cache.load(owner, &ctx.chat_id).await {
        Ok(crate::cache::ai::Loaded::Present { messages, .. }) => messages,
        Ok(crate::cache::ai::Loaded::Missing) => return,
        Err(e) => return tracing::warn!(error = %e, "cannot read the cache to correct an answer"),
    };
    let Some(cached) = messages.last_mut().filter(|m| m.message_id == id) else {
        // Only the cached messages (and their embeds): the chat's counters, message ids and
        // claim stay.
        if let Err(e) = cache.backend().ai_delete(owner, &ctx.chat_id).await {
            tracing::warn!(error = %e, "cannot drop a chat whose answer was corrected");
        }
        return;
    };
    cached.content = text.to_string();
    cached.token_count = Some(tokens::count_one(text).await);
    if let Err(e) = cache.replace(owner, &ctx.chat_id, &messages).await {
        tracing::warn!(error = %e, "cannot correct the cached answer");
    }
}

/// An answer kept for devices that left is kept corrected.
async fn replace_pending(deps: &TurnDeps, owner: &UserHash, ctx: &TurnContext, text: &str) {
    let id = ctx.assistant_message_id();
    let Ok(pending) = deps.ai_cache.pending(owner).await else {
        return;
    };
    for plain in pending {
        let Ok(mut answer) = serde_json::from_slice::<chatd_protocol::PendingAiResponse>(&plain)
        else {
            continue;
        };
        if answer.message_id != id {
            continue;
        }
        answer.content = text.to_string();
        let Ok(plain) = serde_json::to_vec(&answer) else {
            return;
        };
        if let Err(e) = deps.ai_cache.keep_pending(owner, id.as_str(), &plain).await {
            tracing::warn!(error = %e, "cannot correct a pending answer");
        }
        return;
    }
}
