use super::*;

fn feed(deltas: &[&str]) -> (Vec<String>, ParagraphChunker) {
    let mut c = ParagraphChunker::default();
    let mut out = Vec::new();
    for d in deltas {
        for r in c.push(d) {
            out.push(c.text()[r].to_string());
        }
    }
    if let Some(r) = c.finish() {
        out.push(c.text()[r].to_string());
    }
    (out, c)
}

#[test]
fn splits_on_blank_lines() {
    let (out, _) = feed(&["One ", "para.\n", "\nTwo", " para.\n\nThree"]);
    assert_eq!(out, vec!["One para.\n\n", "Two para.\n\n", "Three"]);
}

#[test]
fn code_block_is_one_chunk() {
    let (out, _) = feed(&["Intro\n\n```rust\nfn a() {}\n\nfn b() {}\n```\n", "After"]);
    assert_eq!(
        out,
        vec![
            "Intro\n\n",
            "```rust\nfn a() {}\n\nfn b() {}\n```\n",
            "After"
        ]
    );
}

#[test]
fn delta_boundaries_do_not_matter() {
    let text = "A first paragraph.\n\nA second one with [a link](https://x.y).\n\n```\ncode\n\nmore\n```\nEnd.";
    let whole = feed(&[text]).0;
    let chars: Vec<String> = text.chars().map(String::from).collect();
    let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(feed(&refs).0, whole);
    assert_eq!(whole.concat(), text);
}

#[test]
fn long_paragraph_is_force_flushed() {
    let mut c = ParagraphChunker::new(64);
    let line = "x".repeat(50) + "\n";
    assert!(c.push(&line).is_empty());
    assert_eq!(c.push(&line), vec![0..102]);
}

#[test]
fn whitespace_only_is_never_a_chunk() {
    let (out, _) = feed(&["\n\n", "  \n\n", "Text"]);
    assert_eq!(out, vec!["\n\n  \n\nText"]);
    let (out, _) = feed(&["A\n\n\n\nB"]);
    assert_eq!(out, vec!["A\n\n", "\n\nB"]);
}
