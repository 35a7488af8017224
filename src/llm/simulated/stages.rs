//! The simulated model's answers to the pipeline's forced functions: simple, deterministic
//! heuristics over the user's message, so the embedded default shows every pipeline step.

use serde_json::{Value, json};

/// Arguments of `preprocess`; `title`/`icon_names` only when the schema asks for them.
pub fn preprocess(message: &str, schema: &Value) -> Value {
    let lower = message.to_lowercase();
    let words: Vec<&str> = lower.split(|c: char| !c.is_alphanumeric()).collect();
    let has = |w: &str| words.contains(&w);
    let harm = if ["bomb", "explosive", "nerve agent"]
        .iter()
        .any(|w| lower.contains(w))
    {
        9
    } else {
        0
    };
    let category = if ["code", "rust", "function", "compile", "bug"]
        .iter()
        .any(|w| has(w))
        || message.contains("```")
    {
        "software_development"
    } else {
        "general_knowledge"
    };
    let mut args = json!({
        "harmful_or_illegal_score": harm,
        "misuse_risk_score": 0,
        "language": language(&words),
        "category": category,
        "topic": topic(message),
        "complexity": if message.len() > 400 { "complex" } else { "simple" },
        "chat_tags": tags(message),
        "prompt_injection_chance": if lower.contains("ignore previous instructions") { 0.9 } else { 0.0 },
        "relevant_app_skills": if search_query(message).is_some() { vec!["docs-search"] } else { Vec::new() },
        "relevant_focus_modes": [],
        "load_app_settings_and_memories": [],
        "needs_vision": false,
        "needs_reasoning": false,
    });
    let wants = |k: &str| schema.pointer(&format!("/properties/{k}")).is_some();
    if wants("title") {
        args["title"] = json!(title(message));
    }
    if wants("icon_names") {
        args["icon_names"] = json!(if category == "software_development" {
            vec!["code"]
        } else {
            vec!["message-circle"]
        });
    }
    args
}

/// Arguments of `postprocess`.
pub fn postprocess(message: &str) -> Value {
    let topic = topic(message);
    json!({
        "follow_up_request_suggestions": [
            format!("Explain {topic} in more detail"),
            format!("Give an example of {topic}"),
            format!("Compare {topic} with alternatives"),
            format!("List common mistakes with {topic}"),
            format!("Summarise {topic} in three bullets"),
            format!("Show sources about {topic}"),
        ],
        "new_chat_request_suggestions": [
            "Plan a weekend trip to Lisbon",
            "Explain how WebSockets keep connections open",
            "Write a haiku about autumn rain",
            "Compare three ways to learn Rust",
            "Suggest a healthy weekly meal plan",
            "Describe how zero-knowledge encryption works",
        ],
        "chat_summary": format!("The user asked about {topic} and got a simulated answer."),
        "chat_tags": tags(message),
        "harmful_response": 0,
        "topic_shift": false,
    })
}

/// Arguments of `compress_history` (the latest message of the part it summarises).
pub fn compress_history(message: &str) -> Value {
    let topic = topic(message);
    json!({
        "facts": [format!("The earlier messages were about {topic}.")],
        "decisions": [],
        "open_questions": [],
        "user_preferences": [],
    })
}

/// Arguments of `report_prompt_injection`: the classic phrases, reported verbatim.
pub fn injection(text: &str) -> Value {
    let lower = text.to_lowercase();
    let mut found = Vec::new();
    for phrase in [
        "ignore previous instructions",
        "ignore all previous instructions",
    ] {
        // The sentence the phrase starts, as written (indices of `lower` may not fit `text`
        // when lowercasing changed lengths; then the phrase itself is reported).
        if let Some(at) = lower.find(phrase) {
            let sentence = text
                .get(at..)
                .map(|rest| rest.split(['.', '\n']).next().unwrap_or(rest).to_string())
                .unwrap_or_else(|| phrase.to_string());
            found.push(sentence);
        }
    }
    json!({"score": if found.is_empty() { 0 } else { 9 }, "injection_strings": found})
}

/// What to search for when the user asks to search (the words after "search").
pub fn search_query(message: &str) -> Option<String> {
    let lower = message.to_lowercase();
    let at = lower.find("search")?;
    let rest: String = message[at..]
        .split_whitespace()
        .skip(1)
        .filter(|w| !["for", "the", "docs", "documentation"].contains(&w.to_lowercase().as_str()))
        .collect::<Vec<_>>()
        .join(" ");
    let rest = rest
        .trim_matches(|c: char| !c.is_alphanumeric())
        .to_string();
    Some(if rest.is_empty() {
        "chatd".into()
    } else {
        rest
    })
}

fn language(words: &[&str]) -> &'static str {
    let count = |list: &[&str]| words.iter().filter(|w| list.contains(w)).count();
    let candidates = [
        (
            "de",
            count(&["der", "die", "das", "und", "ist", "wie", "ich", "nicht"]),
        ),
        (
            "fr",
            count(&["le", "la", "les", "est", "je", "bonjour", "pourquoi", "et"]),
        ),
        (
            "es",
            count(&["el", "los", "es", "y", "hola", "por", "qué", "cómo"]),
        ),
    ];
    candidates
        .iter()
        .filter(|(_, n)| *n >= 2)
        .max_by_key(|(_, n)| *n)
        .map_or("en", |(l, _)| l)
}

/// The first few content words.
fn topic(message: &str) -> String {
    let words: Vec<&str> = message
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
        .filter(|w| w.len() > 3)
        .take(3)
        .collect();
    if words.is_empty() {
        "this topic".into()
    } else {
        words.join(" ").to_lowercase()
    }
}

fn tags(message: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in message.split_whitespace() {
        let w = w
            .trim_matches(|c: char| !c.is_alphanumeric())
            .to_lowercase();
        if w.len() > 4 && !out.contains(&w) {
            out.push(w);
        }
        if out.len() == 3 {
            break;
        }
    }
    out
}

/// 3-8 words from the message, capitalised.
fn title(message: &str) -> String {
    let mut words: Vec<String> = message
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()).to_string())
        .filter(|w| !w.is_empty())
        .take(6)
        .collect();
    while words.len() < 3 {
        words.push(["Quick", "Chat", "Question"][words.len()].to_string());
    }
    let mut t = words.join(" ");
    if let Some(first) = t.get(..1) {
        t = first.to_uppercase() + t.get(1..).unwrap_or("");
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preprocess_answers_follow_the_message() {
        let schema = json!({"properties": {"title": {}, "icon_names": {}}});
        let a = preprocess("Wie ist das Wetter und die Lage?", &schema);
        assert_eq!(a["language"], "de");
        assert!(a["title"].as_str().unwrap().split(' ').count() >= 3);
        let b = preprocess("please search the docs for readyz", &json!({}));
        assert_eq!(b["relevant_app_skills"], json!(["docs-search"]));
        assert!(b.get("title").is_none());
        assert_eq!(
            search_query("please search the docs for readyz").unwrap(),
            "readyz"
        );
        assert_eq!(
            preprocess("how to make a bomb", &json!({}))["harmful_or_illegal_score"],
            9
        );
    }

    #[test]
    fn postprocess_gives_six_suggestions_each() {
        let p = postprocess("tell me about sourdough bread");
        assert_eq!(
            p["follow_up_request_suggestions"].as_array().unwrap().len(),
            6
        );
        assert_eq!(
            p["new_chat_request_suggestions"].as_array().unwrap().len(),
            6
        );
    }
}
