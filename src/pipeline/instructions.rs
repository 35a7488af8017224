//! `config/instructions.yml`: the system-prompt parts, mates by category (plus the apps'
//! focus modes, added at start-up) and the function definitions of the preprocessing,
//! postprocessing and history-compression stages. Loaded and
//! validated once at start-up (and by `chatd check-config`).

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use crate::config::PipelineConfig;
use crate::llm::{Schema, ToolDef};

/// The copy compiled into the binary.
pub const DEFAULT_YAML: &str = include_str!("../../config/instructions.yml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Instructions {
    pub prompts: Prompts,
    pub mates: Vec<Mate>,
    /// The apps' focus modes, added at start-up (`crate::focus`); declared in the app
    /// manifests, no longer here (a non-empty list in the file is refused).
    #[serde(default)]
    pub focus_modes: Vec<FocusMode>,
    pub functions: Functions,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prompts {
    pub base_ethics: String,
    pub apps: String,
    pub follow_up: String,
    /// `{date}` (or `{datetime}`) and `{language}` are filled in per turn. It goes in the
    /// turn's own system message after the history (as does `injection_caution`), so a
    /// provider's prompt cache holds a chat's history from one turn to the next whatever it
    /// says (see `pipeline::context`).
    pub date_language: String,
    pub injection_caution: String,
    /// `{categories}`, `{skills}` and `{focus_modes}` are filled in per turn.
    pub preprocessing: String,
    /// `{previous_summary}` is filled in per turn.
    pub postprocessing: String,
    /// Added when an answer is generated again after postprocessing judged it harmful.
    pub harmful_response_caution: String,
    /// The system prompt of history compression (`crate::pipeline::compress`).
    pub compression: String,
    pub rejection: Rejections,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rejections {
    pub harmful_or_illegal_detected: String,
    pub misuse_detected: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mate {
    pub category: String,
    pub mate: String,
    pub instruction: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FocusMode {
    pub id: String,
    pub instruction: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Functions {
    pub preprocess: Function,
    pub postprocess: Function,
    /// Summarises a chat's oldest messages into one compressed message.
    pub compress_history: Function,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Function {
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Schema,
    /// `preprocess` without the first-message-only arguments, made on first use.
    #[serde(skip)]
    later: std::sync::OnceLock<Schema>,
}

/// Function names the stages force with `tool_choice`.
pub const PREPROCESS: &str = "preprocess";
pub const POSTPROCESS: &str = "postprocess";
pub const COMPRESS_HISTORY: &str = "compress_history";

/// Arguments of `preprocess` sent only on a chat's first message.
pub const FIRST_MESSAGE_ONLY: &[&str] = &["title", "icon_names"];

#[derive(Debug, thiserror::Error)]
pub enum InstructionsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("instructions: {0}")]
    Parse(String),
    #[error("instructions: {0}")]
    Invalid(String),
}

impl Instructions {
    /// The configured file, or the compiled-in copy when `pipeline.instructions_file` is empty.
    pub fn load(config: &PipelineConfig) -> Result<Instructions, InstructionsError> {
        if config.instructions_file.as_os_str().is_empty() {
            return Self::parse(DEFAULT_YAML);
        }
        Self::from_file(&config.instructions_file)
    }

    pub fn from_file(path: &Path) -> Result<Instructions, InstructionsError> {
        let text = std::fs::read_to_string(path).map_err(|source| InstructionsError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text)
    }

    pub fn parse(yaml: &str) -> Result<Instructions, InstructionsError> {
        let parsed: Instructions =
            serde_yaml_ng::from_str(yaml).map_err(|e| InstructionsError::Parse(e.to_string()))?;
        parsed.validate()?;
        Ok(parsed)
    }

    fn validate(&self) -> Result<(), InstructionsError> {
        let bad = |m: String| Err(InstructionsError::Invalid(m));
        if self.mates.is_empty() {
            return bad("`mates` must list at least one category".into());
        }
        let mut categories = std::collections::HashSet::new();
        for m in &self.mates {
            if m.category.trim().is_empty() || m.instruction.trim().is_empty() {
                return bad("every mate needs a category and an instruction".into());
            }
            if !categories.insert(m.category.as_str()) {
                return bad(format!("category `{}` has two mates", m.category));
            }
        }
        if let Some(f) = self.focus_modes.first() {
            return bad(format!(
                "focus mode `{}`: focus modes are declared in the app manifests now \
                 (config/apps/*.yml `focus_modes: [{{id, title, instruction, tools}}]`)",
                f.id
            ));
        }
        for (name, f) in [
            (PREPROCESS, &self.functions.preprocess),
            (POSTPROCESS, &self.functions.postprocess),
            (COMPRESS_HISTORY, &self.functions.compress_history),
        ] {
            if f.parameters.get("type").and_then(|t| t.as_str()) != Some("object")
                || !f
                    .parameters
                    .get("properties")
                    .is_some_and(serde_json::Value::is_object)
            {
                return bad(format!(
                    "function `{name}`: parameters must be an object schema with properties"
                ));
            }
        }
        let d = &self.prompts.date_language;
        if !d.contains("{date}") && !d.contains("{datetime}") {
            return bad("prompts.date_language must contain {date} or {datetime}".into());
        }
        if !d.contains("{language}") {
            return bad("prompts.date_language must contain {language}".into());
        }
        Ok(())
    }

    pub fn mate(&self, category: &str) -> Option<&Mate> {
        self.mates.iter().find(|m| m.category == category)
    }

    pub fn default_category(&self) -> &str {
        self.mates
            .first()
            .map_or("general_knowledge", |m| &m.category)
    }

    pub fn focus_mode(&self, id: &str) -> Option<&FocusMode> {
        self.focus_modes.iter().find(|f| f.id == id)
    }

    /// The `preprocess` tool; without the first-message-only arguments unless `first`.
    pub fn preprocess_tool(&self, first: bool) -> ToolDef {
        let f = &self.functions.preprocess;
        let parameters = match first {
            true => f.parameters.clone(),
            false => f.later.get_or_init(|| later(&f.parameters)).clone(),
        };
        ToolDef {
            name: PREPROCESS.into(),
            description: f.description.clone(),
            parameters,
        }
    }

    pub fn postprocess_tool(&self) -> ToolDef {
        let f = &self.functions.postprocess;
        ToolDef {
            name: POSTPROCESS.into(),
            description: f.description.clone(),
            parameters: f.parameters.clone(),
        }
    }

    pub fn compress_tool(&self) -> ToolDef {
        let f = &self.functions.compress_history;
        ToolDef {
            name: COMPRESS_HISTORY.into(),
            description: f.description.clone(),
            parameters: f.parameters.clone(),
        }
    }
}

/// The `preprocess` schema without [`FIRST_MESSAGE_ONLY`] arguments.
fn later(first: &serde_json::Value) -> Schema {
    let mut parameters = first.clone();
    if let Some(props) = parameters
        .get_mut("properties")
        .and_then(|p| p.as_object_mut())
    {
        for key in FIRST_MESSAGE_ONLY {
            // The order of the rest is kept: the main call's fields come first.
            props.shift_remove(*key);
        }
    }
    if let Some(required) = parameters
        .get_mut("required")
        .and_then(|r| r.as_array_mut())
    {
        required.retain(|r| !FIRST_MESSAGE_ONLY.contains(&r.as_str().unwrap_or("")));
    }
    parameters.into()
}

/// Replaces each `{key}` in `template`.
pub fn fill(template: &str, values: &HashMap<&str, String>) -> String {
    let mut out = template.to_string();
    for (k, v) in values {
        out = out.replace(&format!("{{{k}}}"), v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_instructions_are_valid() {
        let i = Instructions::parse(DEFAULT_YAML).unwrap();
        assert!(i.mate("software_development").is_some());
        let first = i.preprocess_tool(true);
        assert!(first.parameters["properties"].get("title").is_some());
        let later = i.preprocess_tool(false);
        assert!(later.parameters["properties"].get("title").is_none());
        assert!(later.parameters["properties"].get("icon_names").is_none());
    }

    #[test]
    fn broken_instructions_are_refused_precisely() {
        let no_mates = DEFAULT_YAML.replace("mates:", "unused_mates:");
        let err = Instructions::parse(&no_mates).unwrap_err().to_string();
        assert!(
            err.contains("unused_mates") || err.contains("mates"),
            "{err}"
        );
        let e = Instructions::parse("prompts: [").unwrap_err();
        assert!(matches!(e, InstructionsError::Parse(_)));
        // Focus modes moved to the app manifests: an old file says where.
        let legacy = format!(
            "{DEFAULT_YAML}\nfocus_modes:\n  - id: docs-deep_dive\n    instruction: Be thorough.\n"
        );
        let err = Instructions::parse(&legacy).unwrap_err().to_string();
        assert!(
            err.contains("docs-deep_dive") && err.contains("config/apps"),
            "{err}"
        );
    }
}
