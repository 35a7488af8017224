//! `chatd lint-skills --start-mcp`: every MCP app's server started once, its tools listed
//! within a deadline and read as chatd would offer them. A server that does not start or
//! list in time, or a tool the manifest declares that the server does not list (a typo
//! that would leave the declaration unused), is a problem; tools left out (no safe way to
//! offer them) are reported with the reason.

use std::sync::Arc;
use std::time::Duration;

use super::McpServer;
use super::tools::skills_of;
use crate::config::KeysConfig;
use crate::skills::manifest::AppManifest;

/// What one MCP app's server offers.
#[derive(Debug)]
pub struct Listing {
    pub app_id: String,
    /// Tools offered as skills.
    pub offered: usize,
    /// Tools left out, with why.
    pub left_out: Vec<(String, String)>,
}

/// Starts each MCP app's server (one at a time, each stopped after), lists its tools and
/// checks them; the first problem as an error.
pub async fn list_all(
    apps: &[AppManifest],
    deadline: Duration,
    keys: &KeysConfig,
) -> Result<Vec<Listing>, String> {
    let keys = Arc::new(keys.clone());
    let mut out = Vec::new();
    for app in apps {
        let Some(spec) = &app.mcp else { continue };
        let server = McpServer::new(app.id.clone(), spec.clone(), deadline, keys.clone());
        let listed = server.list().await;
        server.stop().await;
        let tools = listed.map_err(|e| format!("app `{}`: {e}", app.id))?;
        let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        if let Some(missing) = spec.tools.keys().find(|t| !names.contains(&t.as_str())) {
            return Err(format!(
                "app `{}`: the manifest declares tool `{missing}`, which the server does not list \
                 (it lists: {})",
                app.id,
                names.join(", ")
            ));
        }
        let (skills, left_out) = skills_of(&app.id, spec, &tools);
        out.push(Listing {
            app_id: app.id.clone(),
            offered: skills.len(),
            left_out,
        });
    }
    Ok(out)
}
