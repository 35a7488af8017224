//! The other half of a turn's history: its answer, remembered (see [`remember`]).

use chatd_protocol::Role;

use crate::cache::ai::{AiCache, CachedMessage};
use crate::clock;
use crate::crypto::UserHash;
use crate::pipeline::{TurnContext, tokens};

/// Seals the answer (also a partial one) into the AI cache before the final frame, so the
/// next message in the chat is a cache hit, and, unless a device that asked for it is still
/// here to store it (`requester_here`), keeps it as pending until a device does (`pending_ai_response` on
/// later connections: the user left meanwhile).
pub async fn remember(
    cache: &AiCache,
    owner: &UserHash,
    ctx: &TurnContext,
    text: &str,
    requester_here: bool,
) {
    let message_id = ctx.assistant_message_id();
    let created_at = clock::unix_now();
    let pending = chatd_protocol::PendingAiResponse {
        chat_id: ctx.chat_id.clone(),
        task_id: ctx.task_id.clone(),
        message_id: message_id.clone(),
        user_message_id: ctx.user_message_id.clone(),
        content: text.to_string(),
        model_name: Some(ctx.model_name.clone()),
        category: ctx.category.clone(),
        created_at,
    };
    if !requester_here {
        let plain = serde_json::to_vec(&pending).unwrap_or_default();
        if let Err(e) = cache.keep_pending(owner, message_id.as_str(), &plain).await {
            tracing::warn!(error = %e, "could not keep the answer for devices that left");
        }
    }
    let entry = CachedMessage {
        message_id,
        role: Role::Assistant,
        content: text.to_string(),
        created_at,
        category: None,
        model_name: Some(ctx.model_name.clone()),
        token_count: Some(tokens::count_one(text).await),
        replaces_through: None,
    };
    // The answer is one more message of the chat (counted only while the cache counts).
    if let Err(e) = cache.bump_messages_v(owner, &ctx.chat_id, None).await {
        tracing::warn!(error = %e, "could not count the answer");
    }
    if let Err(e) = cache.append(owner, &ctx.chat_id, &[entry]).await {
        // The answer reached the user; the next turn falls back to request_chat_history.
        tracing::warn!(error = %e, "could not cache the answer");
    }
}
