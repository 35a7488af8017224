//! The module graph of `src/`: which top-level modules each one names through `crate::…`
//! (comments aside). It must have no cycle, and the arrow rules of style.md hold: nothing
//! imports `app` but `main`, only the connection layer reaches `state`, the turn never
//! reaches the connection layer, delivery never reaches the turn or the connection layer,
//! and pipeline, history and skills never reach the turn.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`src/turn/run.rs` → `turn`).
fn owner(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// Top-level modules named by `crate::x` and `crate::{x, y::z}` in code (not comments).
fn references(text: &str) -> BTreeSet<String> {
    let code: String = text
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = BTreeSet::new();
    let single = regex::Regex::new(r"crate::([a-z_][a-z0-9_]*)").unwrap();
    for c in single.captures_iter(&code) {
        out.insert(c[1].to_string());
    }
    // Grouped imports: the names at the first level of the braces.
    let mut rest = code.as_str();
    while let Some(i) = rest.find("crate::{") {
        rest = &rest[i + "crate::{".len()..];
        let (mut depth, mut name, mut at_start) = (1, String::new(), true);
        for ch in rest.chars() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        if !name.is_empty() {
                            out.insert(std::mem::take(&mut name));
                        }
                        break;
                    }
                }
                ',' if depth == 1 => {
                    if !name.is_empty() {
                        out.insert(std::mem::take(&mut name));
                    }
                    at_start = true;
                    continue;
                }
                _ => {}
            }
            if depth == 1 && at_start {
                if ch.is_ascii_alphanumeric() || ch == '_' {
                    name.push(ch);
                } else if !name.is_empty() {
                    out.insert(std::mem::take(&mut name));
                    at_start = false;
                }
            }
        }
        if !name.is_empty() {
            out.insert(name);
        }
    }
    out
}

fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut g = Graph::new();
    for file in files {
        let from = owner(&src, &file);
        if from == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let to = g.entry(from.clone()).or_default();
        for r in references(&text) {
            if r != from {
                to.insert(r);
            }
        }
    }
    g
}

/// One cycle of the graph, if it has any.
fn find_cycle(g: &Graph) -> Option<Vec<String>> {
    fn visit(
        g: &Graph,
        node: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == node) {
            let mut cycle = path[i..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in g.get(node).into_iter().flatten() {
            if let Some(c) = visit(g, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|n| visit(g, n, &mut Vec::new(), &mut done))
}

#[test]
fn src_has_no_import_cycle() {
    let g = graph();
    assert!(g.contains_key("turn") && g.contains_key("session"), "{g:?}");
    if let Some(cycle) = find_cycle(&g) {
        panic!("import cycle: {}", cycle.join(" -> "));
    }
}

#[test]
fn arrows_point_down() {
    let g = graph();
    let reaches = |from: &str, to: &str| g.get(from).is_some_and(|t| t.contains(to));
    for (from, to) in &g {
        if to.contains("app") {
            assert_eq!(from, "main", "{from} imports app");
        }
        if to.contains("state") {
            assert!(
                ["http", "ws", "session", "app"].contains(&from.as_str()),
                "{from} imports state"
            );
        }
    }
    for layer in ["session", "ws", "state", "http"] {
        assert!(!reaches("turn", layer), "turn imports {layer}");
        assert!(!reaches("delivery", layer), "delivery imports {layer}");
    }
    assert!(!reaches("delivery", "turn"), "delivery imports turn");
    for lower in [
        "pipeline", "history", "skills", "cache", "store", "crypto", "llm",
    ] {
        assert!(!reaches(lower, "turn"), "{lower} imports turn");
        assert!(!reaches(lower, "session"), "{lower} imports session");
    }
}

/// The per-turn tools of focus modes and settings/memories proposals emit through the
/// turn's writer (so their frames are numbered and logged for devices that resume); they
/// name neither the delivery nor a wire frame.
#[test]
fn turn_tools_write_through_the_turn() {
    let g = graph();
    for tool in ["focus", "memories"] {
        assert!(
            !g.get(tool).is_some_and(|t| t.contains("delivery")),
            "{tool} imports delivery"
        );
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for file in ["focus/turn.rs", "memories/tools.rs"] {
        let text = std::fs::read_to_string(src.join(file)).unwrap();
        assert!(!text.contains("ServerMessage"), "{file} builds a frame");
    }
}

#[test]
fn the_reader_sees_grouped_imports_and_skips_comments() {
    let refs =
        references("use crate::{a::X, b, c::{d, e}};\n// crate::zzz\nlet _ = crate::f::g();");
    assert_eq!(refs.into_iter().collect::<Vec<_>>(), ["a", "b", "c", "f"]);
}
