//! `chatd lint-skills --start-mcp`: every MCP app's server started once, its tools listed
//! within a deadline and read as chatd would offer them. A server that does not start or
//! list in time, or a tool the manifest declares that the server does not list (a typo
//! that would leave the declaration unused), is a problem; tools left out (no safe way to
//! offer them) are reported with the reason. Which servers run, and with what command, is
//! decided as at start-up ([`super::setup`]): an opt-in app not named in `skills.mcp_apps`
//! is reported off, not started.

use std::sync::Arc;
use std::time::Duration;

use super::McpServer;
use super::tools::skills_of;
use crate::config::{KeysConfig, SkillsConfig};
use crate::skills::manifest::AppManifest;

/// What one MCP app's server offers.
#[derive(Debug)]
pub struct Listing {
    pub app_id: String,
    /// Tools offered as skills.
    pub offered: usize,
    /// Tools left out, with why.
    pub left_out: Vec<(String, String)>,
    /// An opt-in app not switched on (not started, nothing offered).
    pub off: bool,
}

/// Starts each MCP app's server (one at a time, each stopped after), lists its tools and
/// checks them; the first problem as an error.
pub async fn list_all(
    apps: &[AppManifest],
    config: &SkillsConfig,
    deadline: Duration,
    keys: &KeysConfig,
) -> Result<Vec<Listing>, String> {
    let keys = Arc::new(keys.clone());
    let plan = super::setup::plan(apps, config)?;
    let mut out: Vec<Listing> = (plan.off.iter())
        .map(|id| Listing {
            app_id: id.clone(),
            offered: 0,
            left_out: Vec::new(),
            off: true,
        })
        .collect();
    for (id, spec) in plan.servers {
        let server = McpServer::new(id.clone(), spec.clone(), deadline, keys.clone());
        let listed = server.list().await;
        server.stop().await;
        let tools = listed.map_err(|e| format!("app `{id}`: {e}"))?;
        let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        if let Some(missing) = spec.tools.keys().find(|t| !names.contains(&t.as_str())) {
            return Err(format!(
                "app `{id}`: the manifest declares tool `{missing}`, which the server does not list \
                 (it lists: {})",
                names.join(", ")
            ));
        }
        let (skills, left_out) = skills_of(&id, &spec, &tools);
        out.push(Listing {
            app_id: id,
            offered: skills.len(),
            left_out,
            off: false,
        });
    }
    Ok(out)
}
