//! Which apps' MCP servers run on this node, and how their programs are found.
//!
//! An app whose `mcp:` says `enabled: false` is opt-in: its package is not part of chatd
//! (the shipped `time` and `fetch` come from PyPI), so it runs only where
//! `skills.mcp_apps` names it; elsewhere no server starts and none of its tools is offered.
//! A command line comes from `skills.mcp_commands.<app_id>` or else the manifest; a
//! program named without a `/` is looked up in `skills.mcp_bin_dir` first (a virtual
//! environment's `bin/`), then in `PATH`. A program found nowhere does not stop start-up:
//! it is named in a warning, the app offers no tools, and the supervisor tries again with
//! its backoff (a package installed later is picked up). A name in `skills.mcp_apps` or
//! `skills.mcp_commands` that is no MCP app of the set stops start-up (a typo would
//! otherwise switch nothing on).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::McpServer;
use crate::config::{KeysConfig, SkillsConfig};
use crate::skills::manifest::AppManifest;
use crate::skills::manifest::mcp::McpSpec;

/// What runs on this node.
#[derive(Debug, Default)]
pub struct Plan {
    /// App id and its server's spec, the command resolved.
    pub servers: Vec<(String, McpSpec)>,
    /// Opt-in apps not switched on here.
    pub off: Vec<String>,
    /// App id and the program that was not found.
    pub missing: Vec<(String, String)>,
}

/// The plan for `apps` under `config`; a name in `skills.mcp_apps` or `skills.mcp_commands`
/// that is no MCP app (or a command for a server reached by URL) as an error.
pub fn plan(apps: &[AppManifest], config: &SkillsConfig) -> Result<Plan, String> {
    let mcp_app = |id: &str| {
        apps.iter()
            .find(|a| a.id == id)
            .and_then(|a| a.mcp.as_ref())
    };
    for id in &config.mcp_apps {
        if mcp_app(id).is_none() {
            return Err(format!("skills.mcp_apps names `{id}`, which is no MCP app"));
        }
    }
    for id in config.mcp_commands.keys() {
        match mcp_app(id) {
            None => return Err(format!("skills.mcp_commands.{id}: no MCP app `{id}`")),
            Some(spec) if spec.url.is_some() => {
                return Err(format!(
                    "skills.mcp_commands.{id}: the app's server is reached by URL"
                ));
            }
            Some(_) => {}
        }
    }
    let mut plan = Plan::default();
    for app in apps {
        let Some(spec) = &app.mcp else { continue };
        if !spec.enabled && !config.mcp_apps.contains(&app.id) {
            plan.off.push(app.id.clone());
            continue;
        }
        let mut spec = spec.clone();
        if let Some(command) = config.mcp_commands.get(&app.id) {
            spec.command = command.clone();
        }
        if let Some(program) = spec.command.first_mut() {
            match find_program(program, &config.mcp_bin_dir) {
                Some(found) => *program = found.display().to_string(),
                None => plan.missing.push((app.id.clone(), program.clone())),
            }
        }
        plan.servers.push((app.id.clone(), spec));
    }
    Ok(plan)
}

/// The servers of [`plan`], each start-up warning logged.
pub fn servers(
    apps: &[AppManifest],
    config: &SkillsConfig,
    keys: &Arc<KeysConfig>,
) -> Result<Vec<Arc<McpServer>>, String> {
    let plan = plan(apps, config)?;
    for (app, program) in &plan.missing {
        tracing::warn!(
            app = %app,
            program = %program,
            bin_dir = %config.mcp_bin_dir.display(),
            "MCP app's program not found (in skills.mcp_bin_dir or PATH): install it, or set \
             skills.mcp_bin_dir or skills.mcp_commands; its tools are offered once it starts"
        );
    }
    for app in &plan.off {
        tracing::info!(app = %app, "MCP app off here (enabled: false; see skills.mcp_apps)");
    }
    Ok(plan
        .servers
        .into_iter()
        .map(|(id, spec)| Arc::new(McpServer::new(id, spec, config.timeout, keys.clone())))
        .collect())
}

/// `program` as a path: itself when it names one (has a `/`) that exists, else the first
/// `bin_dir/program` or `PATH` entry that is a file.
fn find_program(program: &str, bin_dir: &Path) -> Option<PathBuf> {
    if program.contains('/') {
        let path = PathBuf::from(program);
        return path.is_file().then_some(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let bin = (!bin_dir.as_os_str().is_empty()).then(|| bin_dir.to_path_buf());
    bin.into_iter()
        .chain(std::env::split_paths(&path))
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apps(yaml: &[&str]) -> Vec<AppManifest> {
        yaml.iter()
            .map(|y| serde_yaml_ng::from_str(y).unwrap())
            .collect()
    }

    fn config(edit: impl FnOnce(&mut SkillsConfig)) -> SkillsConfig {
        let mut c = crate::config::Config::defaults().unwrap().skills;
        edit(&mut c);
        c
    }

    #[test]
    fn opt_in_apps_run_only_when_named_and_programs_are_found() {
        let bin = tempfile::tempdir().unwrap();
        std::fs::write(bin.path().join("mcp-server-time"), "").unwrap();
        let set = apps(&[
            "id: time\nname: T\nmcp: {enabled: false, command: [mcp-server-time]}",
            "id: fetch\nname: F\nmcp: {enabled: false, command: [mcp-server-fetch]}",
            "id: own\nname: O\nmcp: {command: [no-such-program-here, -x]}",
        ]);
        let off = plan(&set, &config(|_| {})).unwrap();
        assert_eq!(off.off, vec!["time".to_string(), "fetch".to_string()]);
        assert_eq!(off.servers.len(), 1, "an app without `enabled: false` runs");
        assert_eq!(
            off.missing,
            vec![("own".to_string(), "no-such-program-here".to_string())]
        );

        let on = plan(
            &set,
            &config(|c| {
                c.mcp_apps = vec!["time".into(), "fetch".into()];
                c.mcp_bin_dir = bin.path().to_path_buf();
                c.mcp_commands.insert(
                    "fetch".into(),
                    vec!["no-such-fetch-here".into(), "-v".into()],
                );
            }),
        )
        .unwrap();
        assert!(on.off.is_empty());
        let time = &on.servers[0].1;
        assert_eq!(
            time.command,
            vec![bin.path().join("mcp-server-time").display().to_string()]
        );
        assert_eq!(on.servers[1].1.command[1], "-v", "the configured command");
        assert!(on.missing.iter().any(|(a, _)| a == "fetch"));
    }

    #[test]
    fn unknown_names_in_the_switch_are_refused() {
        let set = apps(&["id: time\nname: T\nmcp: {enabled: false, command: [x]}"]);
        let typo = plan(&set, &config(|c| c.mcp_apps = vec!["tme".into()]));
        assert!(typo.unwrap_err().contains("`tme`"));
        let cmd = plan(
            &set,
            &config(|c| {
                c.mcp_commands.insert("web".into(), vec!["x".into()]);
            }),
        );
        assert!(cmd.unwrap_err().contains("skills.mcp_commands.web"));
    }
}
