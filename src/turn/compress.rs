//! History compression after an answer (never in front of one): when the chat's history, as
//! the model would get it next, passed `pipeline.compress_at` of the main model's window,
//! its oldest messages are summarised into one compressed message (`pipeline::compress`),
//! sealed into the AI cache (appended: a turn that came meanwhile keeps its messages, and
//! `history::compressed` puts it first) and sent to every device (`history_compressed`) to
//! encrypt, store and re-send with the history. One compression per chat at a time on any
//! node: a claim in the cache backend, taken before the cache is read (so a second turn
//! that finds the chat compressed meanwhile does nothing). A failing model leaves the chat
//! as it was (trimmed) and tells the devices (`history_compression_failed`).

use std::sync::Arc;
use std::time::Duration;

use chatd_protocol::{MessageId, Role};

use super::deps::TurnDeps;
use super::writer::TurnWriter;
use crate::cache::ai::{CachedMessage, Loaded};
use crate::cache::backend::keys;
use crate::crypto::UserHash;
use crate::history::compressed;
use crate::metrics::StageLabel;
use crate::pipeline::compress::{self, cost};
use crate::pipeline::function_call::StageError;
use crate::pipeline::models::Models;
use crate::pipeline::{CompressedMessage, HistoryEntry, TurnContext, TurnEvent, TurnSink, tokens};

/// What compression needs after the final frame went out.
pub(in crate::turn) struct CompressJob {
    pub(in crate::turn) ctx: TurnContext,
    /// The answering model's context window.
    pub(in crate::turn) window: u32,
    /// The catalog as the turn reached it (its stage model summarises).
    pub(in crate::turn) models: Models,
}

/// Whether the turn's history (`history` and the answer of `answer_tokens`) may have passed
/// the threshold: by the token bounds (upper bounds: the exact check comes after the claim).
pub(in crate::turn) fn maybe_due(
    deps: &TurnDeps,
    window: u32,
    history: &[HistoryEntry],
    answer: &str,
) -> bool {
    let p = &deps.pipeline;
    let Some(threshold) = compress::threshold(window, p.answer_reserve_tokens, p.compress_at)
    else {
        return false;
    };
    let history: u64 = tokens::bounds(history).into_iter().map(cost).sum();
    history + cost(tokens::estimate(answer)) > threshold
}

/// Compresses the chat's history if it is still due, on the turn tracker (cancelled at
/// shutdown). Failures are logged and counted; a failing model is also told to the devices.
pub(in crate::turn) async fn run_compression(
    deps: Arc<TurnDeps>,
    writer: Arc<TurnWriter>,
    job: CompressJob,
) {
    let owner = UserHash::of(&job.ctx.user);
    let claim = format!("{}:chat:{}:compressing", keys::tag(&owner), job.ctx.chat_id);
    let me = job.ctx.task_id.as_str().as_bytes().to_vec();
    let ttl = deps.pipeline.stage_timeout * 2 + Duration::from_secs(10);
    let backend = deps.ai_cache.backend();
    match backend.kv_claim(&claim, me.clone(), ttl).await {
        Ok(holder) if holder == me => {}
        // Another turn (on any node) compresses this chat now.
        Ok(_) => return,
        Err(e) => return tracing::warn!(error = %e, "cannot claim the chat's compression"),
    }
    let outcome = compress_chat(&deps, &owner, &job).await;
    if let Err(e) = backend.kv_delete(&claim).await {
        tracing::warn!(error = %e, "cannot release the chat's compression claim");
    }
    match outcome {
        Ok(Some(message)) => writer.emit(&job.ctx, TurnEvent::Compressed(message)),
        Ok(None) | Err(Failure::Cancelled) => {}
        Err(Failure::Cache) => {
            deps.metrics.stage_failures.get_or_create(&LABEL).inc();
        }
        Err(Failure::Model(e)) => {
            tracing::warn!(error = %e, "compressing the history failed; the chat is trimmed");
            deps.metrics.stage_failures.get_or_create(&LABEL).inc();
            writer.emit(&job.ctx, TurnEvent::CompressionFailed);
        }
    }
}

const LABEL: StageLabel = StageLabel {
    stage: "compression",
};

enum Failure {
    Cancelled,
    /// The cache or the keys failed (logged where it happened).
    Cache,
    Model(StageError),
}

/// The compressed message now sealed into the cache; `None` when compression is no longer
/// due (the chat was compressed meanwhile, left the cache, or has nothing older to cut).
async fn compress_chat(
    deps: &TurnDeps,
    owner: &UserHash,
    job: &CompressJob,
) -> Result<Option<CompressedMessage>, Failure> {
    let cache = &deps.ai_cache;
    let chat = &job.ctx.chat_id;
    let messages = match cache.load(owner, chat).await {
        Ok(Loaded::Present { messages, .. }) => messages,
        Ok(Loaded::Missing) => return Ok(None),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the chat to compress it");
            return Err(Failure::Cache);
        }
    };
    let view = compressed::view(&messages);
    let counts = counted(&view).await;
    let costs: Vec<u64> = counts.iter().map(|&c| cost(c)).collect();
    let p = &deps.pipeline;
    let reserve = p.answer_reserve_tokens;
    let Some(threshold) = compress::threshold(job.window, reserve, p.compress_at) else {
        return Ok(None);
    };
    if costs.iter().sum::<u64>() <= threshold {
        return Ok(None);
    }
    let user: Vec<bool> = view
        .iter()
        .map(|m| m.role == Role::User && !compressed::is_compressed(m))
        .collect();
    let Some(first_kept) = compress::cut(&costs, &user, threshold) else {
        return Ok(None);
    };
    let older = &view[..first_kept];
    let Some(through) = older.iter().rev().find(|m| !compressed::is_compressed(m)) else {
        return Ok(None);
    };
    let input = older
        .iter()
        .zip(&costs)
        .map(|(m, &c)| (compressed::history_role(m).message(m.content.clone()), c))
        .collect();
    let model = job.models.postprocessing();
    let instructions = &deps.instructions;
    let summary = compress::summarise(
        instructions,
        &model,
        input,
        reserve,
        p.stage_timeout,
        &deps.shutdown,
    )
    .await
    .map_err(|e| match e {
        StageError::Cancelled => Failure::Cancelled,
        e => Failure::Model(e),
    })?;
    let message = CompressedMessage {
        message_id: MessageId::random(),
        created_at: crate::clock::unix_now(),
        replaces_through: through.message_id.clone(),
        content: summary,
    };
    seal(deps, owner, job, &message).await?;
    Ok(Some(message))
}

/// Appends the compressed message to the chat's cached messages.
async fn seal(
    deps: &TurnDeps,
    owner: &UserHash,
    job: &CompressJob,
    m: &CompressedMessage,
) -> Result<(), Failure> {
    let cached = CachedMessage {
        message_id: m.message_id.clone(),
        role: Role::System,
        token_count: Some(tokens::count_one(&m.content).await),
        content: m.content.clone(),
        created_at: m.created_at,
        category: None,
        model_name: None,
        replaces_through: Some(m.replaces_through.clone()),
    };
    match deps
        .ai_cache
        .append(owner, &job.ctx.chat_id, &[cached])
        .await
    {
        Ok(_) => Ok(()),
        Err(e) => {
            tracing::warn!(error = %e, "cannot cache the compressed message");
            Err(Failure::Cache)
        }
    }
}

/// Each message's exact tokens: stored counts, the rest counted off the reactor.
async fn counted(view: &[&CachedMessage]) -> Vec<u32> {
    let uncounted: Vec<String> = view
        .iter()
        .filter(|m| m.token_count.is_none())
        .map(|m| m.content.clone())
        .collect();
    let mut fresh = tokens::count_many(uncounted).await.into_iter();
    view.iter()
        .map(|m| m.token_count.or_else(|| fresh.next()).unwrap_or(0))
        .collect()
}
