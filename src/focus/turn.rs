//! A chat's focus mode during a turn: which one is active ([`active_for_turn`]) and the
//! turn's focus tools ([`FocusTools`], one part of the turn's `ToolSet`): while a focus
//! mode is active its tools are offered; each focus mode has a tool named like it
//! (`app_id-focus_id`, no arguments) that starts it, offered when preprocessing finds the
//! focus mode relevant (see `MainPlan::new`).

use std::sync::Arc;

use chatd_protocol::ChatId;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::catalog::{FocusCatalog, FocusMode};
use crate::cache::ai::{AiCache, FocusRecord};
use crate::crypto::UserHash;
use crate::llm::{ToolCall, ToolDef};
use crate::pipeline::tools::{PreparedCall, SkillInfo, ToolRunner, toon};
use crate::pipeline::{TurnContext, TurnEvent, TurnSink};

/// The chat's focus mode for a turn. The server's record wins; without one, the client's
/// `active_focus_id` (when an app declares it) seeds it and is recorded. A cache that
/// cannot be read leaves the client's word for this turn, unrecorded.
pub async fn active_for_turn(
    catalog: &FocusCatalog,
    cache: &AiCache,
    user: &UserHash,
    chat: &ChatId,
    client: Option<&str>,
) -> Option<Arc<FocusMode>> {
    let seed = client.and_then(|id| catalog.get(id)).cloned();
    match cache.focus(user, chat).await {
        Ok(Some(record)) => record.active.and_then(|id| catalog.get(&id).cloned()),
        Ok(None) => {
            if let Some(mode) = &seed {
                let record = FocusRecord {
                    active: Some(mode.id.clone()),
                };
                if let Err(e) = cache.set_focus(user, chat, &record).await {
                    tracing::warn!(error = %e, "cannot record the client's focus mode");
                }
            }
            seed
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the chat's focus mode; the client's is used");
            seed
        }
    }
}

/// The turn's focus tools (see the module doc).
pub struct FocusTools {
    catalog: Arc<FocusCatalog>,
    active: Option<Arc<FocusMode>>,
    cache: AiCache,
}

impl FocusTools {
    pub fn new(catalog: Arc<FocusCatalog>, active: Option<Arc<FocusMode>>, cache: AiCache) -> Self {
        Self {
            catalog,
            active,
            cache,
        }
    }

    /// The active focus mode's id.
    pub fn active_id(&self) -> Option<&str> {
        self.active.as_deref().map(|m| m.id.as_str())
    }
}

fn definition(mode: &FocusMode) -> ToolDef {
    ToolDef {
        name: mode.id.clone(),
        description: format!(
            "Starts the focus mode \"{}\" in this chat: from then on every answer follows its \
             instruction and gets its tools, until the user ends it. Call it when the user's \
             request fits this mode.",
            mode.title
        ),
        parameters: json!({"type": "object", "properties": {}}).into(),
    }
}

impl ToolRunner for FocusTools {
    /// The start tools are offered through `MainPlan` (preprocessing's relevant focus
    /// modes), so none are listed as skills.
    fn skills(&self) -> Vec<SkillInfo> {
        Vec::new()
    }

    fn always_include(&self) -> Vec<String> {
        self.active
            .as_ref()
            .map(|m| m.tools.clone())
            .unwrap_or_default()
    }

    fn definitions(&self, ids: &[String]) -> Vec<ToolDef> {
        ids.iter()
            .filter_map(|id| self.catalog.get(id))
            .map(|m| definition(m))
            .collect()
    }

    fn prepare(
        &self,
        call: ToolCall,
        ctx: &TurnContext,
        sink: &Arc<dyn TurnSink>,
        _cancel: CancellationToken,
    ) -> PreparedCall {
        let Some(mode) = self.catalog.get(&call.name).cloned() else {
            return PreparedCall::answer(crate::pipeline::tools::refused(&call.name));
        };
        let already = self.active_id() == Some(mode.id.as_str());
        let (cache, sink, ctx) = (self.cache.clone(), sink.clone(), ctx.clone());
        PreparedCall::later(async move {
            if already {
                return toon(&json!({"status": "already_active", "focus_id": mode.id}));
            }
            activate(&cache, sink.as_ref(), &ctx, &mode).await
        })
    }
}

/// Records the focus mode as the chat's active one and tells every device (through the
/// turn's writer: logged, so a device that resumes sees it); the model's tool message says
/// so, with the instruction to follow for the rest of this answer.
async fn activate(
    cache: &AiCache,
    sink: &dyn TurnSink,
    ctx: &TurnContext,
    mode: &FocusMode,
) -> String {
    let record = FocusRecord {
        active: Some(mode.id.clone()),
    };
    let user = UserHash::of(&ctx.user);
    if let Err(e) = cache.set_focus(&user, &ctx.chat_id, &record).await {
        tracing::warn!(error = %e, "cannot record a focus mode the model started");
        return toon(&json!({
            "status": "error",
            "error": "the focus mode could not be started now; answer without it",
        }));
    }
    sink.emit(
        ctx,
        TurnEvent::FocusActivated {
            focus_id: mode.id.clone(),
        },
    );
    toon(&json!({
        "status": "activated",
        "focus_id": mode.id,
        "title": mode.title,
        "instruction": mode.instruction,
    }))
}
