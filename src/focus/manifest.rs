//! The `focus_modes` section of an app manifest (`config/apps/*.yml`):
//!
//! ```yaml
//! focus_modes:
//!   - id: deep_dive              # the focus mode is `app_id-deep_dive`
//!     title: Deep dive
//!     instruction: Answer thoroughly, step by step ...
//!     tools: [docs-search]       # skills (`app_id-skill_id`) offered while it is active
//! ```

use std::collections::HashSet;

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FocusModeManifest {
    /// `[a-z0-9_]`, unique in the app; the focus mode's id is `app_id-id`.
    pub id: String,
    /// Shown to the model in the tool that starts it.
    pub title: String,
    /// Put first in the system prompt while the focus mode is active.
    pub instruction: String,
    /// Skills (`app_id-skill_id`, any app's) offered while it is active.
    #[serde(default)]
    pub tools: Vec<String>,
}

fn slug_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 40
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Checks one app's focus modes against the skills that exist (`app_id-skill_id`). The
/// tool that starts a focus mode is named like it, so no skill of the app may share its id.
pub fn lint(
    app_id: &str,
    modes: &[FocusModeManifest],
    skills: &HashSet<String>,
) -> Result<(), String> {
    let mut ids = HashSet::new();
    for m in modes {
        let full = format!("{app_id}-{}", m.id);
        if !slug_ok(&m.id) {
            return Err(format!(
                "focus mode `{full}`: the id must be 1-40 of [a-z0-9_]"
            ));
        }
        if !ids.insert(m.id.as_str()) {
            return Err(format!("focus mode `{full}` is defined twice"));
        }
        if skills.contains(&full) {
            return Err(format!(
                "focus mode `{full}` has the id of a skill (the tool that starts it is named `{full}`)"
            ));
        }
        if m.title.trim().is_empty() || m.instruction.trim().is_empty() {
            return Err(format!(
                "focus mode `{full}`: a title and an instruction are required"
            ));
        }
        for t in &m.tools {
            if !skills.contains(t) {
                return Err(format!(
                    "focus mode `{full}`: tool `{t}` is not a skill (`app_id-skill_id`)"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(id: &str, tools: &[&str]) -> FocusModeManifest {
        FocusModeManifest {
            id: id.into(),
            title: "Deep dive".into(),
            instruction: "Be thorough.".into(),
            tools: tools.iter().map(|t| t.to_string()).collect(),
        }
    }

    #[test]
    fn lint_errors_name_the_focus_mode() {
        let skills: HashSet<String> = ["docs-search".to_string()].into();
        lint("docs", &[mode("deep_dive", &["docs-search"])], &skills).unwrap();
        let cases = [
            (vec![mode("Deep-Dive", &[])], "1-40 of [a-z0-9_]"),
            (vec![mode("a", &[]), mode("a", &[])], "defined twice"),
            (vec![mode("search", &[])], "has the id of a skill"),
            (vec![mode("deep", &["web-search"])], "tool `web-search`"),
            (
                vec![FocusModeManifest {
                    instruction: " ".into(),
                    ..mode("x", &[])
                }],
                "an instruction are required",
            ),
        ];
        for (modes, want) in cases {
            let err = lint("docs", &modes, &skills).unwrap_err();
            assert!(err.contains(want) && err.contains("docs-"), "{err}");
        }
    }
}
