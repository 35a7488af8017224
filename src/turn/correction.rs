//! An answer postprocessing judged harmful (`harmful_response` at or above
//! `pipeline.harmful_response_threshold`): generated again with a caution
//! (`pipeline::reprocess`), then the new text replaces the first everywhere the server holds
//! it (the AI cache, a pending answer) and on every device (one `ai_message_update` with
//! `correction: "harmful_response"` after the final frame, logged like the turn's frames).
//! The turn's follow-up suggestions are withheld by the caller.

use std::sync::Arc;

use super::deps::TurnDeps;
use super::writer::TurnWriter;
use crate::crypto::UserHash;
use crate::llm::{LlmClient, LlmRequest};
use crate::pipeline::answer::AnswerLimits;
use crate::pipeline::{TurnContext, TurnEvent, TurnSink, reprocess, tokens};

/// What reprocessing needs: the model that answered and the context it answered in.
pub(super) struct Reprocess {
    pub(super) llm: Arc<dyn LlmClient>,
    pub(super) request: LlmRequest,
}

/// Generates the answer again and replaces the first; a failure leaves the first standing.
pub(super) async fn replace_harmful_answer(
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
