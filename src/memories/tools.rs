//! The per-turn tools `{app_id}-settings_memories_{add,update,delete}_{category}` of the
//! categories preprocessing found relevant. The server cannot write the user's
//! client-encrypted entries, so a call becomes an `app_settings_memories_proposal` frame to
//! every device (the entry checked against the category's schema first); the model is told
//! the change was proposed and the answer does not wait. The client's
//! `app_settings_memories_proposal_result` decides; an accepted entry enters the chat's
//! cache (see `session`).

use std::sync::{Arc, OnceLock};

use chatd_protocol::ProposalAction;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::store::PendingProposal;
use super::{Category, Memories};
use crate::crypto::UserHash;
use crate::llm::{ToolCall, ToolDef};
use crate::pipeline::preprocess::normalize_tool_name;
use crate::pipeline::tools::{PreparedCall, SkillInfo, ToolRunner, toon};
use crate::pipeline::{MemoryProposal, TurnContext, TurnEvent, TurnSink};

const ACTIONS: [(ProposalAction, &str); 3] = [
    (ProposalAction::Add, "add"),
    (ProposalAction::Update, "update"),
    (ProposalAction::Delete, "delete"),
];

/// The turn's proposal tools; [`offer`](Self::offer) chooses the categories once
/// preprocessing has run (nothing is offered before).
pub struct ProposalTools {
    memories: Arc<Memories>,
    offered: OnceLock<Vec<Arc<Category>>>,
}

impl ProposalTools {
    pub fn new(memories: Arc<Memories>) -> Self {
        Self {
            memories,
            offered: OnceLock::new(),
        }
    }

    /// Offers the tools of these categories (`app_id:category` keys); returns their ids.
    pub fn offer(&self, keys: &[String]) -> Vec<String> {
        let cats: Vec<Arc<Category>> = keys
            .iter()
            .filter_map(|k| self.memories.categories.get(k).cloned())
            .collect();
        let _ = self.offered.set(cats);
        self.ids()
    }

    fn ids(&self) -> Vec<String> {
        self.offered
            .get()
            .into_iter()
            .flatten()
            .flat_map(|c| ACTIONS.iter().map(move |(_, a)| tool_name(c, a)))
            .collect()
    }

    fn find(&self, name: &str) -> Option<(Arc<Category>, ProposalAction)> {
        let name = normalize_tool_name(name);
        self.offered.get()?.iter().find_map(|c| {
            ACTIONS
                .iter()
                .find(|(_, a)| tool_name(c, a) == name)
                .map(|(action, _)| (c.clone(), *action))
        })
    }
}

fn tool_name(c: &Category, action: &str) -> String {
    format!("{}-settings_memories_{action}_{}", c.app_id, c.spec.id)
}

fn definition(c: &Category, action: ProposalAction, name: String) -> ToolDef {
    let verb = match action {
        ProposalAction::Add => "Propose adding an entry to",
        ProposalAction::Update => "Propose changing an entry (matched by its `id`) of",
        ProposalAction::Delete => "Propose deleting an entry of",
    };
    ToolDef {
        name,
        description: format!(
            "{verb} the user's {} ({}). The user confirms or declines later; do not wait.",
            c.spec.title, c.spec.description
        ),
        parameters: json!({
            "type": "object",
            "properties": {"entry": c.spec.schema},
            "required": ["entry"],
        })
        .into(),
    }
}

impl ToolRunner for ProposalTools {
    /// Nothing before preprocessing: the tools depend on its choice of categories.
    fn skills(&self) -> Vec<SkillInfo> {
        Vec::new()
    }

    fn always_include(&self) -> Vec<String> {
        self.ids()
    }

    fn definitions(&self, ids: &[String]) -> Vec<ToolDef> {
        ids.iter()
            .filter_map(|id| {
                self.find(id)
                    .map(|(c, action)| definition(&c, action, normalize_tool_name(id)))
            })
            .collect()
    }

    fn prepare(
        &self,
        call: ToolCall,
        ctx: &TurnContext,
        sink: &Arc<dyn TurnSink>,
        _cancel: CancellationToken,
    ) -> PreparedCall {
        let done = PreparedCall::answer;
        let Some((category, action)) = self.find(&call.name) else {
            return done(crate::pipeline::tools::refused(&call.name));
        };
        let entry = serde_json::from_str::<Value>(&call.arguments)
            .ok()
            .and_then(|mut v| v.get_mut("entry").map(Value::take));
        let checked = match (entry, action) {
            (None, _) => Err("`entry` is required".to_string()),
            (Some(e), ProposalAction::Delete) if e.is_object() => Ok(e),
            (Some(e), _) => crate::schema::validate(&category.spec.schema, &e).map(|()| e),
        };
        let entry = match checked {
            Ok(e) => e,
            Err(reason) => {
                return done(toon(&json!({
                    "status": "error",
                    "error": format!("invalid entry for {}: {reason}", category.key()),
                })));
            }
        };
        let memories = self.memories.clone();
        let (sink, ctx) = (sink.clone(), ctx.clone());
        let user = UserHash::of(&ctx.user);
        let chat = ctx.chat_id.clone();
        let run = async move {
            let proposal_id = uuid::Uuid::new_v4().to_string();
            let pending = PendingProposal {
                chat_id: chat.clone(),
                app_id: category.app_id.clone(),
                category: category.spec.id.clone(),
                action,
                entry: entry.clone(),
            };
            if let Err(e) = memories
                .store
                .save_proposal(&user, &proposal_id, &pending)
                .await
            {
                tracing::warn!(error = %e, "settings/memories proposal not recorded");
                return toon(&json!({
                    "status": "error",
                    "error": "the proposal could not be recorded; tell the user to try later",
                }));
            }
            // Through the turn's writer: logged, so a device that resumes sees it.
            let proposal = MemoryProposal {
                proposal_id,
                app_id: pending.app_id,
                category: pending.category,
                action,
                entry,
            };
            sink.emit(&ctx, TurnEvent::MemoryProposal(Box::new(proposal)));
            toon(&json!({
                "status": "proposed",
                "message": "proposed; the user will confirm or decline it in the app. Do not wait for it.",
            }))
        };
        PreparedCall::later(run)
    }
}
