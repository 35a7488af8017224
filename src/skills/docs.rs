//! The built-in `docs-search`: a keyword search over chatd's own documentation, compiled in,
//! so the tool loop works offline on embedded defaults.

use serde_json::{Value, json};

const DOCS: &[(&str, &str)] = &[
    ("README.md", include_str!("../../README.md")),
    (
        "protocol/README.md",
        include_str!("../../protocol/README.md"),
    ),
];

/// The paragraphs that share the most words with `query`, best first.
pub fn search(query: &str, limit: usize) -> Vec<Value> {
    let terms: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|t| t.len() > 2)
        .map(str::to_lowercase)
        .collect();
    let mut scored: Vec<(usize, &str, &str)> = DOCS
        .iter()
        .flat_map(|(file, text)| text.split("\n\n").map(move |p| (*file, p)))
        .filter_map(|(file, p)| {
            let lower = p.to_lowercase();
            let score = terms.iter().filter(|t| lower.contains(t.as_str())).count();
            (score > 0).then_some((score, file, p))
        })
        .collect();
    scored.sort_by_key(|s| std::cmp::Reverse(s.0));
    scored
        .into_iter()
        .take(limit)
        .map(|(score, file, p)| {
            let text: String = p.chars().take(400).collect();
            json!({"file": file, "score": score, "text": text})
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_the_readiness_endpoint() {
        let hits = super::search("readyz dependencies", 3);
        assert!(!hits.is_empty());
        assert!(hits[0]["text"].as_str().unwrap().contains("readyz"));
    }
}
