//! The lint of a set of app manifests: ids, each skill's input, executor and output
//! contract (no unconstrained or free-text string reaches the model), each MCP tool's
//! declared output, settings/memories categories and focus modes. It reports the first
//! problem, naming the file and the app or skill.

use std::collections::HashSet;

use regex::Regex;
use serde_json::Map;

use super::{
    AppManifest, BUILTINS, Executor, FieldKind, FieldSpec, InputSchema, ManifestError,
    OutputContract, ResponseMode, SkillManifest, anchored, mcp,
};
use crate::skills::free_text;

/// Checks manifests (with the file each came from) and reports the first problem precisely.
pub fn lint(apps: &[(String, AppManifest)]) -> Result<(), ManifestError> {
    let mut app_ids = HashSet::new();
    for (file, app) in apps {
        let fail = |reason: String| {
            Err(ManifestError::Invalid {
                file: file.clone(),
                reason,
            })
        };
        if !slug_ok(&app.id) {
            return fail(format!(
                "app id `{}` must be 1-40 of [a-z0-9_] (`-` joins app and skill)",
                app.id
            ));
        }
        if !app_ids.insert(app.id.as_str()) {
            return fail(format!("app `{}` is defined twice", app.id));
        }
        if app.skills.is_empty() && app.settings_memories.is_none() && app.mcp.is_none() {
            return fail(format!(
                "app `{}` has no skills, no mcp server and no settings_memories",
                app.id
            ));
        }
        if let Err(reason) = lint_mcp(app) {
            return fail(reason);
        }
        if let Some(section) = &app.settings_memories
            && let Err(reason) = crate::memories::lint_section(section)
        {
            return fail(format!("app `{}`: {reason}", app.id));
        }
        let mut skill_ids = HashSet::new();
        for skill in &app.skills {
            if let Err(reason) = lint_skill(skill) {
                return fail(format!("skill `{}-{}`: {reason}", app.id, skill.id));
            }
            if !skill_ids.insert(skill.id.as_str()) {
                return fail(format!("skill `{}-{}` is defined twice", app.id, skill.id));
            }
        }
    }
    lint_focus_modes(apps)
}

/// An app's `mcp:` section, and each tool's declared output as a skill would have it.
fn lint_mcp(app: &AppManifest) -> Result<(), String> {
    let Some(mcp) = &app.mcp else {
        return Ok(());
    };
    mcp.lint()
        .map_err(|reason| format!("app `{}`: {reason}", app.id))?;
    for (tool, declared) in &mcp.tools {
        let Some(output) = &declared.output else {
            continue;
        };
        lint_skill(&declared_tool(&app.id, tool, output))
            .map_err(|reason| format!("mcp tool `{}-{tool}`: {reason}", app.id))?;
    }
    Ok(())
}

/// A stand-in skill for an MCP tool with a declared output, to lint that output.
fn declared_tool(app_id: &str, tool: &str, output: &OutputContract) -> SkillManifest {
    SkillManifest {
        id: mcp::skill_id(tool),
        description: "declared".into(),
        input: InputSchema {
            properties: Map::new(),
            required: Vec::new(),
        },
        executor: Executor::Mcp {
            app: app_id.to_string(),
            tool: tool.to_string(),
            timeout: None,
        },
        requires_account: false,
        always_include: false,
        rate_limit: None,
        provider: None,
        output: output.clone(),
        personal_data: false,
    }
}

/// Each app's focus modes, against every app's skills and MCP apps (a focus mode may offer
/// any of their tools).
fn lint_focus_modes(apps: &[(String, AppManifest)]) -> Result<(), ManifestError> {
    let skills: HashSet<String> = apps
        .iter()
        .flat_map(|(_, a)| a.skills.iter().map(|s| format!("{}-{}", a.id, s.id)))
        .collect();
    let mcp_apps: HashSet<String> = apps
        .iter()
        .filter(|(_, a)| a.mcp.is_some())
        .map(|(_, a)| a.id.clone())
        .collect();
    let known = crate::focus::manifest::KnownTools {
        skills: &skills,
        mcp_apps: &mcp_apps,
    };
    for (file, app) in apps {
        crate::focus::manifest::lint(&app.id, &app.focus_modes, &known).map_err(|reason| {
            ManifestError::Invalid {
                file: file.clone(),
                reason,
            }
        })?;
    }
    Ok(())
}

/// One skill: its id and description, input schema, executor, rate limit and output
/// contract, in that order; the first problem is reported.
pub(crate) fn lint_skill(s: &SkillManifest) -> Result<(), String> {
    if !slug_ok(&s.id) {
        return Err("the skill id must be 1-40 of [a-z0-9_]".into());
    }
    if s.description.trim().is_empty() {
        return Err("a description is required (the model chooses skills by it)".into());
    }
    lint_input(&s.input)?;
    lint_executor(&s.executor)?;
    if s.rate_limit.is_some_and(|r| r.per_second == 0) {
        return Err("rate_limit.per_second must be at least 1".into());
    }
    lint_output(&s.output)
}

/// The request schema: no `id` (chatd injects it), and every required field a property.
fn lint_input(input: &InputSchema) -> Result<(), String> {
    if input.properties.contains_key("id") {
        return Err(
            "input declares `id`: chatd injects each request's id; remove it from the schema"
                .into(),
        );
    }
    for r in &input.required {
        if !input.properties.contains_key(r) {
            return Err(format!(
                "input.required names `{r}`, which is not a property"
            ));
        }
    }
    Ok(())
}

/// A known built-in, or an http(s) URL.
fn lint_executor(executor: &Executor) -> Result<(), String> {
    match executor {
        Executor::Builtin(name) if !BUILTINS.contains(&name.as_str()) => Err(format!(
            "unknown built-in executor `{name}` (known: {})",
            BUILTINS.join(", ")
        )),
        Executor::Http { url, .. }
            if url::Url::parse(url).map_or(true, |u| !matches!(u.scheme(), "http" | "https")) =>
        {
            Err(format!("executor.http.url `{url}` is not an http(s) URL"))
        }
        _ => Ok(()),
    }
}

/// The output contract: nothing for the model in passthrough, every `agent_data` field
/// constrained, no field declared twice, and the template naming only known fields.
fn lint_output(o: &OutputContract) -> Result<(), String> {
    if o.mode == ResponseMode::Passthrough
        && (!o.agent_data.is_empty() || !o.external_text.is_empty())
    {
        return Err(
            "a passthrough skill gives the model nothing: declare its fields in user_content"
                .into(),
        );
    }
    for (name, spec) in &o.agent_data {
        lint_agent_field(name, spec)?;
    }
    let mut seen: HashSet<&str> = o.agent_data.keys().map(String::as_str).collect();
    for f in o.external_text.iter().chain(&o.user_content) {
        if !seen.insert(f.as_str()) {
            return Err(format!("output field `{f}` is declared twice"));
        }
    }
    if let Some(t) = &o.template {
        for cap in placeholder_names(t) {
            if cap != "count" && !o.agent_data.contains_key(&cap) {
                return Err(format!(
                    "template uses `{{{cap}}}`, which is neither `count` nor an agent_data field"
                ));
            }
        }
    }
    Ok(())
}

/// One `agent_data` field: a string must be constrained (enum, pattern or format) and its
/// pattern must compile and not admit free text; other kinds take no constraints.
fn lint_agent_field(name: &str, spec: &FieldSpec) -> Result<(), String> {
    if spec.kind == FieldKind::String
        && spec.allowed.is_empty()
        && spec.pattern.is_none()
        && spec.format.is_none()
    {
        return Err(format!(
            "agent_data.{name} is an unconstrained string: give it an enum, a pattern or a \
             format, or move it to external_text (checked) or user_content (user only)"
        ));
    }
    if spec.kind != FieldKind::String
        && (spec.pattern.is_some() || spec.format.is_some() || !spec.allowed.is_empty())
    {
        return Err(format!(
            "agent_data.{name}: enum, pattern and format apply to strings only"
        ));
    }
    if let Some(p) = &spec.pattern {
        let re = Regex::new(&anchored(p))
            .map_err(|e| format!("agent_data.{name}.pattern does not compile: {e}"))?;
        if spec.allowed.is_empty() && free_text::admits_free_text(&re) {
            return Err(format!(
                "agent_data.{name}.pattern admits free text (a sentence of more than {} \
                 words): tighten it or give it an enum, or move the field to \
                 external_text (checked) or user_content (user only)",
                free_text::MAX_WORD_RUN
            ));
        }
    }
    Ok(())
}

/// `[a-z0-9_]{1,40}`: app and skill ids (`-` joins them in a tool name).
fn slug_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 40
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The `{name}` placeholders of a template, in order.
fn placeholder_names(template: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let after = &rest[start + 1..];
        let Some(end) = after.find('}') else { break };
        out.push(after[..end].to_string());
        rest = &after[end + 1..];
    }
    out
}
