//! The first defence against prompt injection: every text a skill brings from outside is
//! stripped of invisible Unicode, cut into chunks of at most `skills.injection_chunk_tokens`
//! tokens, and each chunk is checked concurrently by a detection model call
//! (`config/prompt_injection_detection.yml`), on the model `skills.content_sanitization_model`
//! chooses. From the block score on the reported strings are removed; from the review score
//! on the result is flagged. The check fails closed: if the detector cannot answer, or
//! scores the text at or above the block score without naming a string found in it, the
//! text does not reach the model.

use std::path::Path;

use futures_util::future::join_all;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::config::SkillsConfig;
use crate::llm::{LlmMessage, LlmRequest, ToolDef};
use crate::pipeline::function_call::{StageError, call_function};
use crate::pipeline::models::Model;
use crate::pipeline::tokens;

/// What replaces an injected string.
pub const REMOVED: &str = "[PROMPT INJECTION DETECTED & REMOVED]";

const DEFAULT_YAML: &str = include_str!("../../config/prompt_injection_detection.yml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetectorPrompt {
    pub prompt: String,
    pub function: DetectorFunction,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetectorFunction {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

impl DetectorPrompt {
    pub fn load(file: &Path) -> Result<DetectorPrompt, String> {
        let text = if file.as_os_str().is_empty() {
            DEFAULT_YAML.to_string()
        } else {
            std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?
        };
        serde_yaml_ng::from_str(&text).map_err(|e| format!("prompt injection prompt: {e}"))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Raw {
    score: Option<f64>,
    injection_strings: Vec<String>,
}

/// The detector's judgement of one text (all chunks merged).
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub score: f32,
    pub strings: Vec<String>,
}

pub struct Detector {
    pub model: Model,
    pub prompt: DetectorPrompt,
    pub config: SkillsConfig,
}

/// What the model may see of a text, and whether the user should review it.
#[derive(Debug, Clone, PartialEq)]
pub struct Cleaned {
    pub text: String,
    pub flagged: bool,
    /// Either layer removed something from it.
    pub removed: bool,
}

impl Detector {
    /// Checks `text` (already stripped); fails if any chunk cannot be checked. The model is
    /// reached through the chat's pseudonymisation, when it has one.
    pub async fn check(
        &self,
        text: &str,
        cancel: &CancellationToken,
        privacy: Option<&std::sync::Arc<crate::privacy::ChatPrivacy>>,
    ) -> Result<Verdict, StageError> {
        let client = crate::privacy::through(&self.model.client, privacy);
        let chunks = tokens::split_text(text, self.config.injection_chunk_tokens);
        let tool = ToolDef {
            name: self.prompt.function.name.clone(),
            description: self.prompt.function.description.clone(),
            parameters: self.prompt.function.parameters.clone().into(),
        };
        let calls = chunks.iter().map(|chunk| {
            let mut request = LlmRequest::chat(
                self.model.spec.name.clone(),
                vec![
                    LlmMessage::System(self.prompt.prompt.clone()),
                    LlmMessage::User(chunk.clone()),
                ],
            );
            request.tools = vec![tool.clone()];
            call_function(client.as_ref(), request, self.config.timeout, cancel)
        });
        let mut verdict = Verdict {
            score: 0.0,
            strings: Vec::new(),
        };
        for answer in join_all(calls).await {
            let raw: Raw = serde_json::from_value(answer?.arguments).map_err(|e| {
                StageError::BadArguments {
                    function: self.prompt.function.name.clone(),
                    reason: e.to_string(),
                }
            })?;
            verdict.score = verdict
                .score
                .max(raw.score.unwrap_or(0.0).clamp(0.0, 10.0) as f32);
            for s in raw.injection_strings {
                if !s.trim().is_empty() && !verdict.strings.contains(&s) {
                    verdict.strings.push(s);
                }
            }
        }
        Ok(verdict)
    }

    /// Whether a verdict is at or above the block score.
    pub fn blocks(&self, verdict: &Verdict) -> bool {
        verdict.score >= self.config.injection_block_score
    }

    /// Applies a verdict to the texts it covered (after the pre-filter). At or above the
    /// block score the reported strings are removed; when none of them is found in any
    /// text, the detector saw an injection it could not point at and the check fails
    /// closed: `Err(score)`, every text is withheld.
    /// Each text comes with whether the pre-filter already removed something from it.
    pub fn apply(&self, verdict: &Verdict, texts: &[(&str, bool)]) -> Result<Vec<Cleaned>, f32> {
        let blocks = self.blocks(verdict);
        let flagged = verdict.score >= self.config.injection_review_score;
        let mut found = false;
        let cleaned: Vec<Cleaned> = texts
            .iter()
            .map(|&(text, prefiltered)| {
                let mut out = text.to_string();
                let mut removed = prefiltered;
                if blocks {
                    for s in &verdict.strings {
                        if out.contains(s.as_str()) {
                            out = out.replace(s.as_str(), REMOVED);
                            removed = true;
                            found = true;
                        }
                    }
                }
                Cleaned {
                    text: out,
                    flagged,
                    removed,
                }
            })
            .collect();
        if blocks && !found {
            return Err(verdict.score);
        }
        Ok(cleaned)
    }
}

/// Removes characters that hide text from people but not from models: Unicode tag
/// characters, zero-width characters and BiDi controls.
pub fn strip_invisible(text: &str) -> String {
    text.chars()
        .filter(|c| {
            !matches!(*c as u32,
                0xE0000..=0xE007F          // tags
                | 0x200B..=0x200F          // zero-width space/joiners, LRM, RLM
                | 0x202A..=0x202E          // BiDi embeddings and overrides
                | 0x2060..=0x2064          // word joiner, invisible operators
                | 0x2066..=0x2069          // BiDi isolates
                | 0x061C                   // Arabic letter mark
                | 0xFEFF                   // zero-width no-break space
                | 0x00AD                   // soft hyphen
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invisible_characters_are_stripped() {
        let hidden: String = "ignore"
            .chars()
            .map(|c| char::from_u32(0xE0000 + c as u32).unwrap())
            .collect();
        let text = format!("Hello\u{200B} wor\u{202E}ld{hidden}!\u{FEFF}");
        assert_eq!(strip_invisible(&text), "Hello world!");
    }

    #[test]
    fn the_built_in_prompt_loads() {
        let p = DetectorPrompt::load(Path::new("")).unwrap();
        assert_eq!(p.function.name, "report_prompt_injection");
    }
}
