//! The two-speed model's preprocessing reply (see [`super`]): a realistic arguments object
//! in chatd's schema order, cut into token-sized fragments, and its shape (how many
//! fragments, after how many the decision fields are complete).

use std::time::Duration;

/// The two-speed model's `preprocess` answer.
#[derive(Clone, Copy, Debug)]
pub struct Preprocess {
    /// Wait before the first byte.
    pub think: Duration,
    /// Between two fragments of the arguments.
    pub pace: Duration,
    /// About how many fragments (tokens) a chat's first answer is cut into; a fragment is
    /// kept at 3-5 characters, so the count is clamped to what the object's length allows.
    pub tokens: usize,
}

/// The marker that makes a user message a software-development one for the two-speed model.
pub const CODE_MARKER: &str = "[code]";

/// The `preprocess` arguments the two-speed model writes, in chatd's schema order (`first`:
/// with the first message's `title` and `icon_names`), and the length of the part up to
/// the end of the eleventh (last decision) field.
pub fn preprocess_arguments(code: bool, first: bool) -> (String, usize) {
    let (category, title, topic, tags) = if code {
        (
            "software_development",
            "Fixing a Rust borrow checker error",
            "rust programming",
            r#"["rust","borrow-checker","debugging"]"#,
        )
    } else {
        (
            "general_knowledge",
            "Planning a short spring trip",
            "travel planning",
            r#"["travel","spring","planning"]"#,
        )
    };
    let decision = format!(
        r#"{{"harmful_or_illegal_score":0,"misuse_risk_score":0,"prompt_injection_chance":0.0,"language":"en","category":"{category}","complexity":"simple","needs_vision":false,"needs_reasoning":false,"relevant_app_skills":[],"relevant_focus_modes":[],"relevant_app_settings_and_memories":[]"#
    );
    let naming = if first {
        format!(r#","title":"{title}","icon_names":["message-circle"]"#)
    } else {
        String::new()
    };
    let rest = format!(
        r#"{naming},"topic":"{topic}","chat_tags":{tags},"relevant_new_app_settings_and_memories":[]}}"#
    );
    let end = decision.len();
    (decision + rest.as_str(), end)
}

/// Characters per fragment for about `want` fragments in a chat's first `preprocess`
/// answer (the general one, the longest kind but one), kept within 3-5 so a fragment is
/// about a token; every answer is cut at this rate, so the decision fields end at the same
/// fragment whatever follows them.
pub fn chars_per_token(want: usize) -> f64 {
    let (text, _) = preprocess_arguments(false, true);
    (text.len() as f64 / want.max(1) as f64).clamp(3.0, 5.0)
}

/// `text` (ASCII) cut into fragments of `rate` characters on average (the last may be
/// shorter).
pub fn fragments(text: &str, rate: f64) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut i = 1.0;
    while start < text.len() {
        let end = ((i * rate).round() as usize).clamp(start + 1, text.len());
        parts.push(&text[start..end]);
        start = end;
        i += 1.0;
    }
    parts
}

/// How the two-speed model cuts its `preprocess` arguments: (fragments in all, the
/// fragment that completes the decision fields, counted from 1).
pub fn preprocess_shape(code: bool, first: bool, want: usize) -> (usize, usize) {
    let (text, end) = preprocess_arguments(code, first);
    let parts = fragments(&text, chars_per_token(want));
    let mut at = 0;
    let mut decided = parts.len();
    for (i, f) in parts.iter().enumerate() {
        at += f.len();
        if at >= end {
            decided = i + 1;
            break;
        }
    }
    (parts.len(), decided)
}

/// Tokens of the scripted answer: the first is a paragraph of its own (so a relay that
/// streams whole paragraphs, like chatd, can show a first frame at once), then
/// paragraphs of eight tokens.
pub fn token_text(i: usize) -> String {
    if i == 0 {
        "Sure.\n\n".to_string()
    } else if i.is_multiple_of(8) {
        format!(" word{i}.\n\n")
    } else {
        format!(" word{i}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preprocess_arguments_are_json_in_schema_order_cut_into_token_sized_fragments() {
        for (code, first) in [(false, false), (false, true), (true, false), (true, true)] {
            let (text, end) = preprocess_arguments(code, first);
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
            assert_eq!(keys[4], "category");
            assert_eq!(keys[10], "relevant_app_settings_and_memories");
            assert_eq!(v.get("title").is_some(), first);
            assert!(text[..end].ends_with("\"relevant_app_settings_and_memories\":[]"));
            let parts = fragments(&text, chars_per_token(100));
            assert_eq!(parts.concat(), text);
            let last = parts.len() - 1;
            assert!(parts[..last].iter().all(|f| (3..=5).contains(&f.len())));
            let (n, decided) = preprocess_shape(code, first, 100);
            assert_eq!(n, parts.len());
            assert!(parts[..decided].concat().len() >= end);
            assert!(parts[..decided - 1].concat().len() < end);
        }
        assert_eq!(preprocess_shape(false, true, 100).0, 100);
    }
}
