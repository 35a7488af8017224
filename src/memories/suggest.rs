//! Settings/memory suggestions after an answer, in two phases: phase 1 chooses up to
//! [`MAX_SUGGESTIONS`] categories from those preprocessing found worth suggesting for;
//! phase 2 writes one entry for each (concurrently), kept only when it is valid against
//! its category's schema and its hash is not among the chat's rejected ones. A failure
//! of either phase only means fewer suggestions.

use std::time::Duration;

use chatd_protocol::{ChatId, SuggestedSettingsMemoryEntry};
use futures_util::future::join_all;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::{Category, Memories};
use crate::auth::UserId;
use crate::llm::{LlmMessage, LlmRequest, ToolDef};
use crate::pipeline::function_call::call_function;
use crate::pipeline::models::Model;

pub const MAX_SUGGESTIONS: usize = 3;
const CHOOSE: &str = "choose_settings_memories_categories";
const SUGGEST: &str = "suggest_settings_memory_entry";

/// SHA-256 hex of `app_id:item_type:` and the lower-cased title: the hash a client sends
/// in `reject_settings_memory_suggestion`.
pub fn suggestion_hash(app_id: &str, item_type: &str, title: &str) -> String {
    let mut h = Sha256::new();
    h.update(format!("{app_id}:{item_type}:{}", title.to_lowercase()).as_bytes());
    hex::encode(h.finalize())
}

/// `hash` is 64 lowercase hex characters.
pub fn valid_hash(hash: &str) -> bool {
    hash.len() == 64
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What the suggestions are made from.
pub struct Exchange<'a> {
    pub user: &'a UserId,
    pub chat: &'a ChatId,
    pub user_message: &'a str,
    pub answer: &'a str,
    /// `app_id:category` keys preprocessing found worth suggesting for.
    pub candidates: &'a [String],
}

/// The suggestions for one exchange (none when a phase fails or the store is down).
pub async fn run(
    memories: &Memories,
    model: &Model,
    timeout: Duration,
    exchange: &Exchange<'_>,
    cancel: &CancellationToken,
) -> Vec<SuggestedSettingsMemoryEntry> {
    let candidates: Vec<&Category> = exchange
        .candidates
        .iter()
        .filter_map(|k| memories.categories.get(k).map(AsRef::as_ref))
        .collect();
    if candidates.is_empty() {
        return Vec::new();
    }
    let rejected = match memories.chats.chat(exchange.user, exchange.chat).await {
        Ok(chat) => chat
            .map(|c| c.rejected_suggestion_hashes)
            .unwrap_or_default(),
        Err(e) => {
            // Without the rejected hashes a rejected suggestion could come back: none.
            tracing::warn!(error = %e, "store unavailable; no settings/memory suggestions");
            return Vec::new();
        }
    };
    let Some(chosen) = choose(model, timeout, exchange, &candidates, cancel).await else {
        return Vec::new();
    };
    // Phase 2: one entry per chosen category.
    let calls = chosen.iter().map(|c| {
        let request = entry_request(model, exchange, c);
        call_function(model.client.as_ref(), request, timeout, cancel)
    });
    let answers = join_all(calls).await;
    chosen
        .into_iter()
        .zip(answers)
        .filter_map(|(c, answer)| accepted(c, &answer.ok()?.arguments, &rejected))
        .collect()
}

/// The exchange as the model sees it, under `system`.
fn conversation(exchange: &Exchange<'_>, system: String) -> Vec<LlmMessage> {
    vec![
        LlmMessage::System(system),
        LlmMessage::User(exchange.user_message.to_string()),
        LlmMessage::Assistant {
            content: exchange.answer.to_string(),
            tool_calls: Vec::new(),
        },
    ]
}

/// Phase 1: which of `candidates` deserve a suggestion (at most [`MAX_SUGGESTIONS`], in
/// the candidates' order); `None` when the call failed.
async fn choose<'c>(
    model: &Model,
    timeout: Duration,
    exchange: &Exchange<'_>,
    candidates: &[&'c Category],
    cancel: &CancellationToken,
) -> Option<Vec<&'c Category>> {
    let keys: Vec<String> = candidates.iter().map(|c| c.key()).collect();
    let listing: Vec<String> = candidates
        .iter()
        .map(|c| format!("{}: {}", c.key(), c.spec.description))
        .collect();
    let mut request = LlmRequest::chat(
        model.spec.name.clone(),
        conversation(
            exchange,
            format!(
                "Choose at most {MAX_SUGGESTIONS} categories in which the user would want to \
                 save something from this exchange (none if nothing is worth saving). \
                 Categories:\n{}",
                listing.join("\n")
            ),
        ),
    );
    request.tools = vec![ToolDef {
        name: CHOOSE.into(),
        description: "The categories worth a new settings/memory entry.".into(),
        parameters: json!({"type": "object", "required": ["categories"], "properties": {
            "categories": {"type": "array", "maxItems": MAX_SUGGESTIONS,
                           "items": {"type": "string", "enum": keys}}}})
        .into(),
    }];
    match call_function(model.client.as_ref(), request, timeout, cancel).await {
        Ok(called) => {
            let named: Vec<String> = called.arguments["categories"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(super::canonical_key)
                .collect();
            let mut out: Vec<&Category> = Vec::new();
            for c in candidates {
                if named.contains(&c.key()) && out.len() < MAX_SUGGESTIONS {
                    out.push(c);
                }
            }
            Some(out)
        }
        Err(e) => {
            tracing::warn!(error = %e, "settings/memory suggestion phase 1 failed");
            None
        }
    }
}

/// Phase 2's request for one entry of `category`.
fn entry_request(model: &Model, exchange: &Exchange<'_>, category: &Category) -> LlmRequest {
    let c = category;
    let mut request = LlmRequest::chat(
        model.spec.name.clone(),
        conversation(
            exchange,
            format!(
                "Suggest one new entry for the user's {} ({}), taken from this exchange, \
                 with a short title.",
                c.spec.title, c.spec.description
            ),
        ),
    );
    request.tools = vec![ToolDef {
        name: SUGGEST.into(),
        description: "One suggested settings/memory entry.".into(),
        parameters: json!({"type": "object", "required": ["suggested_title", "item_value"],
            "properties": {"suggested_title": {"type": "string", "maxLength": 100},
                           "item_value": c.spec.schema}})
        .into(),
    }];
    request
}

/// The entry phase 2 wrote for `c` (its `arguments`), if it is valid against the
/// category's schema and its hash is not among the `rejected`.
fn accepted(
    c: &Category,
    arguments: &Value,
    rejected: &[String],
) -> Option<SuggestedSettingsMemoryEntry> {
    let title = arguments["suggested_title"]
        .as_str()
        .map(str::trim)
        .unwrap_or_default()
        .to_string();
    let value = arguments["item_value"].clone();
    if title.is_empty() || title.chars().count() > 100 {
        return None;
    }
    if crate::schema::validate(&c.spec.schema, &value).is_err() {
        return None;
    }
    if rejected.contains(&suggestion_hash(&c.app_id, &c.spec.id, &title)) {
        return None;
    }
    Some(SuggestedSettingsMemoryEntry {
        app_id: c.app_id.clone(),
        item_type: c.spec.id.clone(),
        suggested_title: title,
        item_value: value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_over_the_lower_cased_title() {
        let h = suggestion_hash("travel", "trips", "Kyoto In Autumn");
        assert_eq!(h, suggestion_hash("travel", "trips", "kyoto in autumn"));
        assert!(valid_hash(&h));
        assert!(!valid_hash(&h.to_uppercase()));
        assert!(!valid_hash("abc"));
        assert_eq!(
            suggestion_hash("a", "b", "c"),
            hex::encode(Sha256::digest(b"a:b:c"))
        );
    }
}
