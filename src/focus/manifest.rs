//! The `focus_modes` section of an app manifest (`config/apps/*.yml`):
//!
//! ```yaml
//! focus_modes:
//!   - id: deep_dive              # the focus mode is `app_id-deep_dive`
//!     title: Deep dive
//!     instruction: Answer thoroughly, step by step ...
//!     tools: [docs-search]       # skills (`app_id-skill_id`) or MCP tools (`app_id-tool`) offered while active
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

/// The tools a focus mode may name: every manifest skill (`app_id-skill_id`), and any tool of
/// an MCP app (`app_id-tool`: its server lists them only when it runs, so the name is taken
/// on trust and offered once the server lists it).
pub struct KnownTools<'a> {
    pub skills: &'a HashSet<String>,
    pub mcp_apps: &'a HashSet<String>,
}

impl KnownTools<'_> {
    fn knows(&self, tool: &str) -> bool {
        self.skills.contains(tool)
            || tool
                .split_once('-')
                .is_some_and(|(app, t)| self.mcp_apps.contains(app) && slug_ok(t))
    }
}

/// Checks one app's focus modes against the tools that exist. The tool that starts a focus
/// mode is named like it, so no skill of the app may share its id.
pub fn lint(
    app_id: &str,
    modes: &[FocusModeManifest],
    known: &KnownTools<'_>,
) -> Result<(), String> {
    let skills = known.skills;
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
            if !known.knows(t) {
                return Err(format!(
                    "focus mode `{full}`: tool `{t}` is not a skill (`app_id-skill_id`) nor a \
                     tool of an MCP app (`app_id-tool`)"
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
        let mcp_apps: HashSet<String> = ["time".to_string()].into();
        let known = KnownTools {
            skills: &skills,
            mcp_apps: &mcp_apps,
        };
        lint("docs", &[mode("deep_dive", &["docs-search"])], &known).unwrap();
        // Any tool of an MCP app, by a valid name.
        lint("docs", &[mode("clock", &["time-get_current_time"])], &known).unwrap();
        let cases = [
            (vec![mode("Deep-Dive", &[])], "1-40 of [a-z0-9_]"),
            (vec![mode("a", &[]), mode("a", &[])], "defined twice"),
            (vec![mode("search", &[])], "has the id of a skill"),
            (vec![mode("deep", &["web-search"])], "tool `web-search`"),
            (
                vec![mode("clock", &["time-Get-Time"])],
                "tool `time-Get-Time`",
            ),
            (
                vec![FocusModeManifest {
                    instruction: " ".into(),
                    ..mode("x", &[])
                }],
                "an instruction are required",
            ),
        ];
        for (modes, want) in cases {
            let err = lint("docs", &modes, &known).unwrap_err();
            assert!(err.contains(want) && err.contains("docs-"), "{err}");
        }
    }
}
