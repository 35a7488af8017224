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
        .map(|(score, file, p)| json!({"file": file, "score": score, "text": excerpt(p, &terms)}))
        .collect()
}

/// At most 400 characters of a paragraph, from the first line that holds a query term (a
/// long table keeps the row that matched).
fn excerpt(paragraph: &str, terms: &[String]) -> String {
    let from = paragraph
        .split_inclusive('\n')
        .scan(0, |offset, line| {
            let start = *offset;
            *offset += line.len();
            Some((start, line))
        })
        .find(|(_, line)| {
            let lower = line.to_lowercase();
            terms.iter().any(|t| lower.contains(t.as_str()))
        })
        .map_or(0, |(start, _)| start);
    paragraph[from..].chars().take(400).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_excerpt_starts_at_the_line_that_matched() {
        let table = format!(
            "| a | b |\n{}| `GET /readyz` | ready |\n",
            "| row | x |\n".repeat(60)
        );
        let text = super::excerpt(&table, &["readyz".to_string()]);
        assert!(text.starts_with("| `GET /readyz`"), "{text}");
    }

    #[test]
    fn finds_the_readiness_endpoint() {
        let hits = super::search("readyz dependencies", 3);
        assert!(!hits.is_empty());
        assert!(hits[0]["text"].as_str().unwrap().contains("readyz"));
    }
}
