//! Every app's focus modes by `app_id-focus_id`, built once from the manifests.

use std::sync::Arc;

use super::manifest::FocusModeManifest;
use crate::pipeline::instructions;

/// One focus mode, ready to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FocusMode {
    /// `app_id-focus_id`: also the name of the tool that starts it.
    pub id: String,
    pub app_id: String,
    pub title: String,
    pub instruction: String,
    /// Skills offered while it is active.
    pub tools: Vec<String>,
}

#[derive(Debug, Default)]
pub struct FocusCatalog {
    modes: Vec<Arc<FocusMode>>,
}

impl FocusCatalog {
    /// From each app's id and focus-mode section (linted already).
    pub fn new<'a>(apps: impl IntoIterator<Item = (&'a str, &'a [FocusModeManifest])>) -> Self {
        let modes = apps
            .into_iter()
            .flat_map(|(app, modes)| {
                modes.iter().map(move |m| {
                    Arc::new(FocusMode {
                        id: format!("{app}-{}", m.id),
                        app_id: app.to_string(),
                        title: m.title.trim().to_string(),
                        instruction: m.instruction.trim().to_string(),
                        tools: m.tools.clone(),
                    })
                })
            })
            .collect();
        Self { modes }
    }

    pub fn get(&self, id: &str) -> Option<&Arc<FocusMode>> {
        self.modes.iter().find(|m| m.id == id)
    }

    pub fn all(&self) -> &[Arc<FocusMode>] {
        &self.modes
    }

    /// Adds every focus mode to the prompt parts (preprocessing lists them; the system
    /// prompt puts the active one's instruction first).
    pub fn extend_instructions(&self, into: &mut instructions::Instructions) {
        for m in &self.modes {
            into.focus_modes.retain(|f| f.id != m.id);
            into.focus_modes.push(instructions::FocusMode {
                id: m.id.clone(),
                instruction: m.instruction.clone(),
            });
        }
    }
}
