//! A turn's history: read from the AI cache, or re-cached from what the client re-sent.
//! When the cache cannot give the model a faithful history (the chat is missing, an entry
//! does not open, or fewer than half the expected messages survive) the server asks the
//! client with `request_chat_history` and starts no model call; the client answers by
//! re-sending its latest message with `message_history`. At most one round trip per
//! message: a re-send without a usable history is a typed error, not another request.
//! (The session checks a re-sent history's shape; this module decides what it means.)
//! A hit reads the chat and appends the new message in one cache operation; a re-sent
//! history is cached uncounted (its length bounds its tokens, see `pipeline::tokens`).

pub mod compressed;
pub mod embed_refs;
mod remember;
#[cfg(test)]
mod tests;

use std::collections::HashSet;

use chatd_protocol::{
    ChatId, ClientEmbed, EmbedId, HistoryMessage, HistoryReason, MessageId, RequestChatEmbeds,
    RequestChatHistory, Role,
};
use futures_util::future::join_all;

use crate::cache::ai::{AiCache, CacheFault, CachedMessage, EmbedWrite, Loaded, content_hash};
use crate::crypto::UserHash;
use crate::inbound::Inbound;
use crate::pipeline::HistoryEntry;
use crate::pipeline::tokens::{self, Tokens};

pub use remember::remember;

/// What a turn can do next.
#[derive(Debug)]
pub enum Prepared {
    /// The model's history, oldest first, ending with the new user messages.
    Ready(Vec<HistoryEntry>),
    /// Ask the client for the history; no model call.
    NeedHistory(RequestChatHistory),
    /// Ask the client for embeds the cached messages refer to; no model call.
    NeedEmbeds(RequestChatEmbeds),
    /// The client's re-send cannot be used (`invalid_chat_history`).
    Invalid(String),
}

/// Builds the history for a turn answering `inbound` (oldest first).
pub async fn prepare(
    cache: &AiCache,
    user: &UserHash,
    chat: &ChatId,
    inbound: &[Inbound],
) -> Result<Prepared, CacheFault> {
    let (Some(first), Some(latest)) = (inbound.first(), inbound.last()) else {
        return Ok(Prepared::Invalid("no message to answer".into()));
    };
    cache_embeds(cache, user, chat, inbound).await?;
    let new_messages = counted_user_entries(inbound).await;
    // The client re-sent the history (in answer to `request_chat_history`, or unasked).
    if let Some(history) = inbound
        .iter()
        .rev()
        .find_map(|i| i.message.message_history.as_ref())
    {
        let expected = first.prior_messages;
        return from_resent(cache, user, chat, inbound, history, expected, new_messages).await;
    }
    from_cache(cache, user, chat, inbound, (first, latest), new_messages).await
}

/// The new messages as cached, each with its token count.
async fn counted_user_entries(inbound: &[Inbound]) -> Vec<CachedMessage> {
    let mut new_messages: Vec<CachedMessage> = inbound.iter().map(user_entry).collect();
    let counts = tokens::count_many(new_messages.iter().map(|m| m.content.clone()).collect()).await;
    for (m, n) in new_messages.iter_mut().zip(counts) {
        m.token_count = Some(n);
    }
    new_messages
}

/// The history the client re-sent (`expected` earlier messages), cached in place of the
/// chat's, with the new messages after it.
async fn from_resent(
    cache: &AiCache,
    user: &UserHash,
    chat: &ChatId,
    inbound: &[Inbound],
    history: &[HistoryMessage],
    expected: u64,
    new_messages: Vec<CachedMessage>,
) -> Result<Prepared, CacheFault> {
    if history.is_empty() && expected > 0 {
        return Ok(Prepared::Invalid(format!(
            "message_history is empty but the chat has {expected} earlier messages"
        )));
    }
    let new_ids: HashSet<&MessageId> = inbound.iter().map(Inbound::message_id).collect();
    let mut all = Vec::with_capacity(history.len() + new_messages.len());
    let mut seen = HashSet::new();
    for h in history {
        // The client re-sends empty messages too (a cancelled answer, a placeholder).
        if h.content.trim().is_empty()
            || new_ids.contains(&h.message_id)
            || !seen.insert(&h.message_id)
        {
            continue;
        }
        all.push(CachedMessage {
            message_id: h.message_id.clone(),
            role: h.role,
            token_count: None,
            content: h.content.clone(),
            created_at: h.created_at,
            category: h.category.clone(),
            model_name: h.model_name.clone(),
            replaces_through: h.replaces_through.clone(),
        });
    }
    // Cached uncounted: counting a long history here would hold the turn for
    // milliseconds, and its length bounds it until a budget needs the exact count.
    all.extend(new_messages);
    cache.replace(user, chat, &all).await?;
    // The client sends a history's embeds with it: what it lacks is marked unavailable.
    let (history, _) = for_model(cache, user, &all).await?;
    Ok(Prepared::Ready(history))
}

/// The chat as cached with the new messages appended; the client is asked for the history
/// when the cache cannot give a faithful one (`first` and `latest` of `inbound`).
async fn from_cache(
    cache: &AiCache,
    user: &UserHash,
    chat: &ChatId,
    inbound: &[Inbound],
    (first, latest): (&Inbound, &Inbound),
    new_messages: Vec<CachedMessage>,
) -> Result<Prepared, CacheFault> {
    let expected = first
        .prior_messages
        .max(u64::from(first.message.chat_has_title));
    let expected = expected.min(cache.policy().max_messages as u64);
    // One round trip: the chat as cached, and the new messages appended to it (a chat new
    // to the cache is created; a missing one with earlier messages is left missing).
    let (cached, failed) = match cache
        .load_append(user, chat, &new_messages, expected == 0)
        .await?
    {
        Loaded::Missing => (Vec::new(), None),
        Loaded::Present { messages, failed } => (messages, Some(failed)),
    };
    let cached_ids: HashSet<&MessageId> = cached.iter().map(|m| &m.message_id).collect();
    let fresh: Vec<CachedMessage> = new_messages
        .into_iter()
        .filter(|m| !cached_ids.contains(&m.message_id))
        .collect();
    if fresh.len() < inbound.len() && failed == Some(0) {
        // A plain re-send of a message the cache held: it was just appended a second time,
        // so write the list back with each message once.
        let all: Vec<CachedMessage> = cached.iter().chain(&fresh).cloned().collect();
        cache.replace(user, chat, &all).await?;
    }
    if let Some(reason) = history_lacking(failed, expected, &cached, inbound) {
        if latest.history_requested {
            return Ok(Prepared::Invalid(
                "the chat history was requested; re-send the message with message_history".into(),
            ));
        }
        let cached_count = earlier(&cached, inbound).len() as u64;
        return Ok(Prepared::NeedHistory(history_request(
            chat,
            reason,
            expected,
            cached_count,
        )));
    }
    let mut all = cached;
    all.extend(fresh);
    let keep = all.len().saturating_sub(cache.policy().max_messages);
    all.drain(..keep);
    with_embeds(cache, user, chat, latest, &all).await
}

/// Why the cached chat (`failed` entries did not open; `None`: missing) cannot give the
/// model a faithful history of `expected` earlier messages, if it cannot.
fn history_lacking(
    failed: Option<usize>,
    expected: u64,
    cached: &[CachedMessage],
    inbound: &[Inbound],
) -> Option<HistoryReason> {
    match failed {
        None if expected > 0 => Some(HistoryReason::CacheMiss),
        Some(f) if f > 0 => Some(HistoryReason::DecryptionFailed),
        // The new messages may already be cached (a plain re-send): count only earlier ones.
        Some(_) if (earlier(cached, inbound).len() as u64) * 2 < expected => {
            Some(HistoryReason::InsufficientCacheHistory)
        }
        _ => None,
    }
}

/// The `request_chat_history` for `reason` (counts only when the cache holds too few).
fn history_request(
    chat: &ChatId,
    reason: HistoryReason,
    expected: u64,
    cached_count: u64,
) -> RequestChatHistory {
    let insufficient = reason == HistoryReason::InsufficientCacheHistory;
    RequestChatHistory {
        chat_id: chat.clone(),
        message: match reason {
            HistoryReason::CacheMiss => "The server has no cached history for this chat.",
            HistoryReason::DecryptionFailed => {
                "The server's cached history for this chat can no longer be decrypted."
            }
            HistoryReason::InsufficientCacheHistory => {
                "The server's cached history for this chat is incomplete."
            }
        }
        .into(),
        reason,
        expected_messages: insufficient.then_some(expected),
        cached_messages: insufficient.then_some(cached_count),
    }
}

/// The history of `all` for the model, unless the client must first send embeds the
/// cache lacks.
async fn with_embeds(
    cache: &AiCache,
    user: &UserHash,
    chat: &ChatId,
    latest: &Inbound,
    all: &[CachedMessage],
) -> Result<Prepared, CacheFault> {
    let (history, missing) = for_model(cache, user, all).await?;
    // Embeds the cache lacks are asked for once per message (the client has them in its
    // store); what the re-send still lacks is marked unavailable and not asked for again.
    if !missing.is_empty() && latest.history_requested {
        for embed in &missing {
            cache.mark_unavailable(user, chat, embed).await?;
        }
    } else if !missing.is_empty() {
        return Ok(Prepared::NeedEmbeds(RequestChatEmbeds {
            chat_id: chat.clone(),
            message_id: latest.message_id().clone(),
            embed_ids: missing,
            message: "The server's cache lacks embeds this chat refers to; re-send the message \
                      with them in `embeds`."
                .into(),
        }));
    }
    Ok(Prepared::Ready(history))
}

/// Cached messages that are not among the ones this turn answers.
fn earlier<'a>(cached: &'a [CachedMessage], inbound: &[Inbound]) -> Vec<&'a CachedMessage> {
    let new_ids: HashSet<&MessageId> = inbound.iter().map(Inbound::message_id).collect();
    cached
        .iter()
        .filter(|m| !new_ids.contains(&m.message_id))
        .collect()
}

fn user_entry(i: &Inbound) -> CachedMessage {
    CachedMessage {
        message_id: i.message.message_id.clone(),
        role: Role::User,
        token_count: None,
        content: i.message.content.clone(),
        created_at: i.message.created_at,
        category: None,
        model_name: None,
        replaces_through: None,
    }
}

async fn cache_embeds(
    cache: &AiCache,
    user: &UserHash,
    chat: &ChatId,
    inbound: &[Inbound],
) -> Result<(), CacheFault> {
    let embeds: Vec<&ClientEmbed> = inbound.iter().flat_map(|i| i.embeds.iter()).collect();
    for embed in embeds {
        // A copy whose content is not what its hash says is not used (nor cached).
        if embed
            .content_hash
            .as_ref()
            .is_some_and(|h| *h != content_hash(&embed.embed_type, &embed.content))
        {
            tracing::warn!(embed_id = %embed.embed_id, "ignoring an embed whose content_hash does not match");
            continue;
        }
        if cache.put_embed(user, chat, embed).await? == EmbedWrite::Foreign {
            tracing::warn!(embed_id = %embed.embed_id, "ignoring an embed id owned by another user");
        }
    }
    Ok(())
}

/// The model's view: a compressed history's summary and the messages after it
/// ([`compressed::view`]), embed references resolved from the cache (a marker for each one
/// it lacks), and the ids of the embeds it lacks that the client could send.
async fn for_model(
    cache: &AiCache,
    user: &UserHash,
    messages: &[CachedMessage],
) -> Result<(Vec<HistoryEntry>, Vec<EmbedId>), CacheFault> {
    let messages = compressed::view(messages);
    let refs: Vec<Vec<embed_refs::EmbedRef>> = messages
        .iter()
        .map(|m| embed_refs::find(&m.content))
        .collect();
    let mut ids: Vec<&str> = refs.iter().flatten().map(|r| r.embed_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    let lookups = ids.iter().map(|id| async move {
        match EmbedId::parse(*id) {
            Ok(embed) => cache
                .get_embed(user, &embed)
                .await
                .map(|e| (Some(embed), e)),
            Err(_) => Ok((None, None)),
        }
    });
    let mut found = std::collections::HashMap::new();
    let mut missing = Vec::new();
    for result in join_all(lookups).await {
        match result? {
            (Some(id), Some(e)) if !e.is_unavailable() => {
                found.insert(id.as_str().to_string(), e);
            }
            // The client did not have it when asked: a marker, not another question.
            (Some(_), Some(_)) => {}
            (Some(id), None) => missing.push(id),
            (None, _) => {}
        }
    }
    let history = messages
        .iter()
        .zip(&refs)
        .map(|(m, refs)| {
            // Resolved embeds change the text: its stored count no longer applies.
            let (content, counted) = if refs.is_empty() {
                (m.content.clone(), m.token_count)
            } else {
                let text =
                    embed_refs::substitute(&m.content, refs, |r| match found.get(&r.embed_id) {
                        Some(e) => embed_refs::render(e),
                        None => embed_refs::missing(r),
                    });
                (text, None)
            };
            HistoryEntry {
                role: compressed::history_role(m),
                tokens: Tokens::of(&content, counted),
                content,
                created_at: m.created_at,
            }
        })
        .collect();
    Ok((history, missing))
}
