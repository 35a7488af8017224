//! `set_app_preferences`: the user switches apps and single skills off (seed row 27). The
//! preferences replace the kept ones, sealed with the user's key in the shared cache; every
//! device hears `app_preferences_set`. Turns read them when they choose their tools
//! ([`crate::pipeline::tools::SwitchedOff`]).

use chatd_protocol::{AppPreferencesSet, MAX_APP_PREFERENCES, ServerMessage, SetAppPreferences};

use super::Session;
use crate::delivery::Audience;

impl Session {
    pub(super) async fn set_app_preferences(&self, m: SetAppPreferences) {
        if let Err(reason) = check(&m) {
            return self.invalid(reason, None);
        }
        let mut prefs = AppPreferencesSet {
            disabled_apps: m.disabled_apps,
            disabled_skills: m.disabled_skills,
        };
        prefs.disabled_apps.sort();
        prefs.disabled_apps.dedup();
        prefs.disabled_skills.sort();
        prefs.disabled_skills.dedup();
        if let Err(e) = self
            .app
            .ai_cache
            .set_app_preferences(&self.device.user_hash, &prefs)
            .await
        {
            tracing::warn!(error = %e, "cannot keep the app preferences");
            return self.cache_fault(&e, None);
        }
        self.broadcast(Audience::All, &ServerMessage::AppPreferencesSet(prefs));
    }
}

/// `[a-z0-9_]{1,40}`, as app and skill ids are.
fn slug(s: &str) -> bool {
    (1..=40).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn check(m: &SetAppPreferences) -> Result<(), String> {
    if m.disabled_apps.len() > MAX_APP_PREFERENCES || m.disabled_skills.len() > MAX_APP_PREFERENCES
    {
        return Err(format!(
            "at most {MAX_APP_PREFERENCES} disabled_apps and {MAX_APP_PREFERENCES} disabled_skills"
        ));
    }
    if let Some(bad) = m.disabled_apps.iter().find(|a| !slug(a)) {
        return Err(format!(
            "disabled_apps: `{}` is not an app id ([a-z0-9_], 1-40)",
            bad.chars().take(60).collect::<String>()
        ));
    }
    if let Some(bad) = m.disabled_skills.iter().find(|s| {
        s.split_once('-')
            .is_none_or(|(app, skill)| !slug(app) || !slug(skill))
    }) {
        return Err(format!(
            "disabled_skills: `{}` is not `app_id-skill_id`",
            bad.chars().take(90).collect::<String>()
        ));
    }
    Ok(())
}
