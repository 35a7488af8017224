//! Routines as the turn's tools (a part of [`crate::pipeline::tools::ToolSet`]): each
//! routine is the tool `app_id-name` (offered when preprocessing picks it, like a skill, or
//! always with `always_include`), its parameters the routine's argument
//! schema; a call starts a run and its tool message is the run's result or question.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::Routines;
use crate::llm::{ToolCall, ToolDef};
use crate::pipeline::tools::{PreparedCall, SkillInfo, ToolRunner};
use crate::pipeline::{TurnContext, TurnSink};

impl ToolRunner for Routines {
    fn skills(&self) -> Vec<SkillInfo> {
        self.catalog()
            .all()
            .iter()
            .map(|r| SkillInfo {
                id: r.tool.clone(),
                description: r.manifest.description.clone(),
                requires_account: None,
            })
            .collect()
    }

    fn always_include(&self) -> Vec<String> {
        self.catalog()
            .all()
            .iter()
            .filter(|r| r.manifest.always_include)
            .map(|r| r.tool.clone())
            .collect()
    }

    fn definitions(&self, ids: &[String]) -> Vec<ToolDef> {
        ids.iter()
            .filter_map(|id| self.catalog().find(id).filter(|r| &r.tool == id))
            .map(|r| ToolDef {
                name: r.tool.clone(),
                description: format!(
                    "Routine {}: {} (it may ask the user questions over several messages)",
                    r.full_id, r.manifest.description
                ),
                parameters: r.manifest.arguments.clone().into(),
            })
            .collect()
    }

    fn prepare(
        &self,
        call: ToolCall,
        ctx: &TurnContext,
        sink: &Arc<dyn TurnSink>,
        cancel: CancellationToken,
    ) -> PreparedCall {
        let Some(routine) = self.catalog().find(&call.name).cloned() else {
            return PreparedCall::answer(crate::pipeline::tools::refused(&call.name));
        };
        let this = self.clone();
        let (ctx, sink) = (ctx.clone(), sink.clone());
        PreparedCall::later(async move {
            this.start(routine, &call.arguments, ctx, sink, cancel)
                .await
        })
    }
}
