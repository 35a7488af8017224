//! The user's app preferences (seed row 27: uninstalled apps and deactivated skills are
//! excluded): which apps are switched off (none of their skills, focus modes, routines or
//! settings proposals is offered to a model) and which single skills are. The client sends
//! them with `set_app_preferences` after it connects (and whenever they change); chatd keeps
//! them sealed with the user's key and answers every device with `app_preferences_set`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most entries of each list.
pub const MAX_APP_PREFERENCES: usize = 200;

/// Replaces the user's app preferences; `app_preferences_set` to every device.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SetAppPreferences {
    /// App ids switched off (`[a-z0-9_]`, 1-40).
    #[serde(alias = "disabledApps", default)]
    pub disabled_apps: Vec<String>,
    /// Skills switched off, `app_id-skill_id`.
    #[serde(alias = "disabledSkills", default)]
    pub disabled_skills: Vec<String>,
}

/// The user's app preferences as chatd now applies them; to every device.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AppPreferencesSet {
    pub disabled_apps: Vec<String>,
    pub disabled_skills: Vec<String>,
}
