//! The routines of every app: their manifests (the `routines` section) and their compiled
//! scripts, read from `<apps_dir>/<app_id>/<name>.rhai` (or the built-in copies). Linting
//! compiles each script and checks its literal calls: `run` names a routine that exists,
//! `skill` a skill that exists, `emit` a known kind.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use regex::Regex;

use super::emit::EmitKind;
use super::sandbox::sandbox;
use crate::skills::manifest::{self, AppManifest};
use crate::skills::routine_manifest::RoutineManifest;

/// The built-in routine scripts (for the built-in manifests), as (app, routine, text).
const BUILT_IN: &[(&str, &str, &str)] = &[
    (
        "web",
        "research",
        include_str!("../../config/apps/web/research.rhai"),
    ),
    (
        "web",
        "plan_trip",
        include_str!("../../config/apps/web/plan_trip.rhai"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum RoutinesError {
    #[error("routines: {0}")]
    Manifest(#[from] manifest::ManifestError),
    #[error("routine `{routine}`: {reason}")]
    Invalid { routine: String, reason: String },
}

/// One routine, ready to run.
pub struct Routine {
    pub app_id: String,
    /// `app_id.name`.
    pub full_id: String,
    /// `app_id-name`, the tool name.
    pub tool: String,
    pub manifest: RoutineManifest,
    pub ast: rhai::AST,
}

#[derive(Default)]
pub struct Catalog {
    routines: Vec<Arc<Routine>>,
}

impl Catalog {
    /// Loads the manifests of `apps_dir` (empty: built-in) and compiles their routines.
    pub fn load(apps_dir: &Path) -> Result<Catalog, RoutinesError> {
        let apps = manifest::load(apps_dir)?;
        // A script missing from the directory is the built-in copy, if there is one.
        let built_in = |app: &str, name: &str| {
            BUILT_IN
                .iter()
                .find(|(a, n, _)| *a == app && *n == name)
                .map(|(_, _, t)| t.to_string())
        };
        Self::build(&apps, |app, name| {
            if apps_dir.as_os_str().is_empty() {
                return built_in(app, name).ok_or_else(|| "no built-in script".to_string());
            }
            let path = apps_dir.join(app).join(format!("{name}.rhai"));
            match std::fs::read_to_string(&path) {
                Ok(text) => Ok(text),
                Err(e) => built_in(app, name).ok_or_else(|| format!("{}: {e}", path.display())),
            }
        })
    }

    pub(super) fn build(
        apps: &[AppManifest],
        read: impl Fn(&str, &str) -> Result<String, String>,
    ) -> Result<Catalog, RoutinesError> {
        let engine = sandbox(&crate::config::RoutinesConfig::default());
        let skills: HashSet<String> = apps
            .iter()
            .flat_map(|a| a.skills.iter().map(move |s| format!("{}-{}", a.id, s.id)))
            .collect();
        let mut routines = Vec::new();
        let mut scripts = Vec::new();
        for app in apps {
            for r in &app.routines {
                let full_id = format!("{}.{}", app.id, r.name);
                let invalid = |reason: String| RoutinesError::Invalid {
                    routine: full_id.clone(),
                    reason,
                };
                let slug = !r.name.is_empty()
                    && r.name.len() <= 40
                    && r.name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
                if !slug {
                    return Err(invalid("the name must be 1-40 of [a-z0-9_]".into()));
                }
                let tool = format!("{}-{}", app.id, r.name);
                if skills.contains(&tool) || routines.iter().any(|x: &Arc<Routine>| x.tool == tool)
                {
                    return Err(invalid(format!("`{tool}` is already a skill or routine")));
                }
                if r.arguments.get("type").and_then(|t| t.as_str()) != Some("object") {
                    return Err(invalid("`arguments` must be an object schema".into()));
                }
                crate::schema::lint(&r.arguments)
                    .map_err(|e| invalid(format!("`arguments` is not a JSON Schema: {e}")))?;
                let text = read(&app.id, &r.name).map_err(invalid)?;
                let ast = engine
                    .compile(&text)
                    .map_err(|e| invalid(format!("does not compile: {e}")))?;
                scripts.push((full_id.clone(), text));
                routines.push(Arc::new(Routine {
                    app_id: app.id.clone(),
                    full_id,
                    tool,
                    manifest: r.clone(),
                    ast,
                }));
            }
        }
        let catalog = Catalog { routines };
        for (id, text) in &scripts {
            catalog
                .check_calls(text, &skills)
                .map_err(|reason| RoutinesError::Invalid {
                    routine: id.clone(),
                    reason,
                })?;
        }
        Ok(catalog)
    }

    /// The literal targets of `run`, `skill` and `emit` in a script exist.
    fn check_calls(&self, text: &str, skills: &HashSet<String>) -> Result<(), String> {
        let calls =
            Regex::new(r#"\b(run|skill|emit)\s*\(\s*"([^"]*)""#).map_err(|e| e.to_string())?;
        for c in calls.captures_iter(text) {
            let target = &c[2];
            let ok = match &c[1] {
                "run" => self.find(target).is_some(),
                "skill" => {
                    skills.contains(&crate::pipeline::preprocess::normalize_tool_name(target))
                }
                _ => EmitKind::parse(target).is_some(),
            };
            if !ok {
                return Err(format!(
                    "`{}(\"{target}\", ..)` names nothing that exists",
                    &c[1]
                ));
            }
        }
        Ok(())
    }

    /// A routine by `app.name` or its tool name `app-name`.
    pub fn find(&self, name: &str) -> Option<&Arc<Routine>> {
        let tool = crate::pipeline::preprocess::normalize_tool_name(name);
        self.routines.iter().find(|r| r.tool == tool)
    }

    pub fn all(&self) -> &[Arc<Routine>] {
        &self.routines
    }
}
