//! Preprocessing's answers merged into one decision: maximum scores, the language of the
//! last block (which holds the last user message), the union of tags and skills, everything
//! named checked against what exists and what the user may use; and the safe defaults when
//! no answer came.

use chatd_protocol::RejectionReason;

use super::{Input, Preprocessed, Raw, Stage};
use crate::config::Capability;
use crate::pipeline::models::{Choice, Complexity, Needs};

impl Stage<'_> {
    /// The answers of every block as one decision.
    pub(super) fn merge(&self, answers: Vec<Raw>, input: &Input<'_>) -> Preprocessed {
        let harm = max_score(&answers, |r| r.harmful_or_illegal_score);
        let misuse = max_score(&answers, |r| r.misuse_risk_score);
        let injection_chance = answers
            .iter()
            .filter_map(|r| r.prompt_injection_chance)
            .fold(0.0f64, f64::max)
            .clamp(0.0, 1.0) as f32;
        // The last block holds the last user message.
        let last = answers.last();
        let language = last
            .and_then(|r| r.language.as_deref())
            .map(clean_language)
            .filter(|l| !l.is_empty())
            .unwrap_or_else(|| "en".into());
        let category = last
            .and_then(|r| r.category.clone())
            .filter(|c| self.instructions.mate(c).is_some())
            .unwrap_or_else(|| self.instructions.default_category().to_string());
        let complexity = complexity(&answers);
        let tags = tags(&answers);
        let skills = self.valid_skills(
            answers.iter().flat_map(|r| r.relevant_app_skills.iter()),
            input.connected_accounts,
        );
        let focus_modes = self.focus_modes(&answers);
        let settings_memories = known_categories(
            answers
                .iter()
                .flat_map(|r| r.relevant_app_settings_and_memories.iter()),
            &input.settings_saved,
        );
        let new_settings_memories = known_categories(
            answers
                .iter()
                .flat_map(|r| r.relevant_new_app_settings_and_memories.iter()),
            &input.settings_categories,
        );
        let (title, icon_names) = if input.first_message {
            title_and_icons(&answers)
        } else {
            (None, Vec::new())
        };
        let needs = needs(&answers, &skills);
        let choice = self.models.choose(complexity, &needs, input.pinned_model);
        let rejection = self.rejection(harm, misuse);
        Preprocessed {
            harm,
            misuse,
            language,
            mate: self.instructions.mate(&category).map(|m| m.mate.clone()),
            category,
            topic: last.and_then(|r| r.topic.clone()),
            complexity,
            tags,
            injection_chance,
            skills,
            focus_modes,
            settings_memories,
            new_settings_memories,
            title,
            icon_names,
            choice,
            rejection,
            degraded: false,
            blocks: 0,
        }
    }

    /// The focus modes named that exist, each once.
    fn focus_modes(&self, answers: &[Raw]) -> Vec<String> {
        let mut focus_modes = Vec::new();
        for f in answers.iter().flat_map(|r| r.relevant_focus_modes.iter()) {
            let f = normalize_tool_name(f);
            if self.instructions.focus_mode(&f).is_some() && !focus_modes.contains(&f) {
                focus_modes.push(f);
            }
        }
        focus_modes
    }

    /// Why the message is refused: the harm score first, then the misuse score, each at
    /// its configured threshold.
    fn rejection(&self, harm: u8, misuse: u8) -> Option<RejectionReason> {
        if harm >= self.config.harm_threshold {
            Some(RejectionReason::HarmfulOrIllegalDetected)
        } else if misuse >= self.config.misuse_threshold {
            Some(RejectionReason::MisuseDetected)
        } else {
            None
        }
    }

    /// Safe defaults: the default model, no tools, no rejection.
    pub(super) fn defaults(&self, input: &Input<'_>) -> Preprocessed {
        let mut choice = match input.pinned_model.and_then(|id| self.models.get(id)) {
            Some(m) => Choice {
                model: m.clone(),
                reason: String::new(),
            },
            None => Choice {
                model: self.models.main(),
                reason: String::new(),
            },
        };
        choice.reason = "preprocessing failed; default model".into();
        let category = self.instructions.default_category().to_string();
        Preprocessed {
            harm: 0,
            misuse: 0,
            language: "en".into(),
            mate: self.instructions.mate(&category).map(|m| m.mate.clone()),
            category,
            topic: None,
            complexity: Complexity::Simple,
            tags: Vec::new(),
            injection_chance: 0.0,
            skills: Vec::new(),
            focus_modes: Vec::new(),
            settings_memories: Vec::new(),
            new_settings_memories: Vec::new(),
            title: None,
            icon_names: Vec::new(),
            choice,
            rejection: None,
            degraded: true,
            blocks: 0,
        }
    }

    /// Known skills the user may use, plus the always-included ones.
    fn valid_skills<'s>(
        &self,
        named: impl Iterator<Item = &'s String>,
        connected: &[String],
    ) -> Vec<String> {
        let known = self.tools.skills();
        let mut out: Vec<String> = Vec::new();
        for name in named
            .map(|n| normalize_tool_name(n))
            .chain(self.tools.always_include())
        {
            let Some(skill) = known.iter().find(|s| s.id == name) else {
                continue;
            };
            if let Some(app) = &skill.requires_account
                && !connected.contains(app)
            {
                continue;
            }
            if !out.contains(&skill.id) {
                out.push(skill.id.clone());
            }
        }
        out
    }
}

/// The highest score of the answers, 0 to 10.
fn max_score(answers: &[Raw], f: fn(&Raw) -> Option<f64>) -> u8 {
    answers
        .iter()
        .filter_map(f)
        .fold(0.0f64, f64::max)
        .clamp(0.0, 10.0)
        .round() as u8
}

/// Complex when any answer says so.
fn complexity(answers: &[Raw]) -> Complexity {
    if answers
        .iter()
        .any(|r| r.complexity.as_deref() == Some("complex"))
    {
        Complexity::Complex
    } else {
        Complexity::Simple
    }
}

/// The answers' chat tags: lower-cased, each once, at most 10 of at most 40 bytes.
fn tags(answers: &[Raw]) -> Vec<String> {
    let mut tags = Vec::new();
    for t in answers.iter().flat_map(|r| r.chat_tags.iter()) {
        let t = t.trim().to_lowercase();
        if !t.is_empty() && t.len() <= 40 && !tags.contains(&t) && tags.len() < 10 {
            tags.push(t);
        }
    }
    tags
}

/// The first answer's title and the first non-empty icon names, cleaned.
fn title_and_icons(answers: &[Raw]) -> (Option<String>, Vec<String>) {
    let title = answers
        .iter()
        .find_map(|r| r.title.as_deref())
        .and_then(clean_title);
    let icons = answers
        .iter()
        .find(|r| !r.icon_names.is_empty())
        .map(|r| clean_icons(&r.icon_names))
        .unwrap_or_default();
    (title, icons)
}

/// What the main model must be able to do: tools when skills were chosen, vision and
/// reasoning when any answer asks for them.
fn needs(answers: &[Raw], skills: &[String]) -> Needs {
    let mut needs = Needs::default();
    if !skills.is_empty() {
        needs.capabilities.push(Capability::Tools);
    }
    if answers.iter().any(|r| r.needs_vision) {
        needs.capabilities.push(Capability::Vision);
    }
    if answers.iter().any(|r| r.needs_reasoning) {
        needs.capabilities.push(Capability::Reasoning);
    }
    needs
}

/// Models write `app:skill`, `app.skill` or `app_skill`; the canonical form is `app-skill`.
pub fn normalize_tool_name(name: &str) -> String {
    let trimmed = name.trim();
    if let Some((app, skill)) = trimmed.split_once(['-', ':', '.', '|']) {
        return format!("{app}-{skill}");
    }
    trimmed.to_string()
}

/// The named categories that exist, as `app_id:category` (models also write `app-category`
/// and `app.category`), each once.
fn known_categories<'s>(named: impl Iterator<Item = &'s String>, known: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in named {
        let key = match n.trim().split_once([':', '-', '.', '|']) {
            Some((app, cat)) => format!("{app}:{cat}"),
            None => continue,
        };
        if known.contains(&key) && !out.contains(&key) {
            out.push(key);
        }
    }
    out
}

pub(super) fn or_none(s: &str) -> String {
    if s.is_empty() {
        "none".into()
    } else {
        s.into()
    }
}

fn clean_language(l: &str) -> String {
    l.trim()
        .chars()
        .take_while(|c| c.is_ascii_alphabetic() || *c == '-')
        .take(8)
        .collect::<String>()
        .to_lowercase()
}

/// 3-8 words (longer titles are cut to 8); fewer than one word is no title.
fn clean_title(t: &str) -> Option<String> {
    let words: Vec<&str> = t.split_whitespace().take(8).collect();
    if words.is_empty() {
        return None;
    }
    Some(
        words
            .join(" ")
            .trim_matches(|c: char| c == '"' || c == '.')
            .to_string(),
    )
}

/// 1-3 Lucide-style names: lowercase letters, digits and dashes.
fn clean_icons(icons: &[String]) -> Vec<String> {
    icons
        .iter()
        .map(|i| {
            i.trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect::<String>()
        })
        .filter(|i| !i.is_empty() && i.len() <= 40)
        .take(3)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_titles_are_cleaned() {
        assert_eq!(normalize_tool_name("docs:search"), "docs-search");
        assert_eq!(normalize_tool_name("docs.search"), "docs-search");
        assert_eq!(clean_language(" DE "), "de");
        assert_eq!(
            clean_title("one two three four five six seven eight nine ten").as_deref(),
            Some("one two three four five six seven eight")
        );
        assert_eq!(clean_title("   "), None);
        assert_eq!(
            clean_icons(&["Code".into(), "bad icon!".into(), "a".into(), "b".into()]),
            vec!["code", "badicon", "a"]
        );
    }
}
