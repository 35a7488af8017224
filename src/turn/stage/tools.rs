//! The turn's tools beside the skills and routines: the chat's focus mode and the
//! settings/memories proposals, less what the user switched off.

use super::Turn;
use super::prepare::Ready;
use crate::focus::FocusTools;
use crate::memories::tools::ProposalTools;
use crate::pipeline::tools::{SwitchedOff, ToolRunner, ToolSet};

/// The per-turn tools of other owners than the skills: the chat's focus mode and the
/// settings/memories proposals (they join the skills in [`TurnTools::set`]).
pub(in crate::turn) struct TurnTools {
    pub(super) focus: FocusTools,
    pub(super) proposals: ProposalTools,
    /// What the user switched off (`set_app_preferences`).
    off: SwitchedOff,
}

impl TurnTools {
    pub(in crate::turn) async fn new(turn: &Turn<'_>, ready: &Ready) -> Self {
        let app = turn.deps;
        // The chat's focus mode: the server's record, or the client's seed.
        let active = crate::focus::active_for_turn(
            &app.focus,
            &app.ai_cache,
            &turn.owner,
            turn.chat,
            ready.opts.active_focus_id.as_deref(),
        )
        .await;
        let off = match app.ai_cache.app_preferences(&turn.owner).await {
            Ok(Some(p)) => SwitchedOff::new(p.disabled_apps, p.disabled_skills),
            Ok(None) => SwitchedOff::default(),
            Err(e) => {
                tracing::warn!(error = %e, "app preferences unavailable; every app is offered");
                SwitchedOff::default()
            }
        };
        // A focus mode of an app the user switched off is not applied.
        let active = active.filter(|mode| off.allows(&mode.id));
        Self {
            focus: FocusTools::new(app.focus.clone(), active, app.ai_cache.clone()),
            proposals: ProposalTools::new(app.memories.clone()),
            off,
        }
    }

    /// Every tool the turn may offer: the skills, the routines, focus and proposals.
    pub(in crate::turn) fn set<'t>(&'t self, turn: &'t Turn<'_>) -> ToolSet<'t> {
        ToolSet::new(vec![
            turn.deps.skills.as_ref() as &dyn ToolRunner,
            &turn.deps.routines,
            &self.focus,
            &self.proposals,
        ])
        .without(self.off.clone())
    }
}
