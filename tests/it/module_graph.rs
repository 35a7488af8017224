//! The module graph of `src/`: which top-level modules each one names through `crate::…`
//! (comments aside). It must have no cycle, and the arrow rules of style.md hold: nothing
//! imports `app` but `main`, only the connection layer reaches `state`, the turn never
//! reaches the connection layer, delivery never reaches the turn or the connection layer,
//! and pipeline, history and skills never reach the turn. Inside every folder the same
//! holds for sibling files: no file imports a sibling that imports it back, however long
//! the way round.

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
    let code = code_of(text);
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

/// A file's module path (`src/turn/stage/plan.rs` → `turn::stage::plan`); `None` for the
/// crate roots.
fn module_path(src: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(src).ok()?.with_extension("");
    let path: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    match path.as_slice() {
        [root] if root == "lib" || root == "main" => None,
        _ => Some(path),
    }
}

/// The code of a file without its comments.
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path a file names from `crate::`, `super::` or `self::`, made absolute (a module
/// path with the item at its end), grouped imports expanded.
fn paths_named(module: &[String], code: &str) -> Vec<Vec<String>> {
    let start =
        regex::Regex::new(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)(::\{)?").unwrap();
    let mut out = Vec::new();
    for c in start.captures_iter(code) {
        let base: Vec<&str> = std::iter::once(&c[1])
            .chain(c[2].split("::").filter(|s| !s.is_empty()))
            .collect();
        let heads = match c.get(3) {
            None => vec![base.iter().map(|s| s.to_string()).collect::<Vec<_>>()],
            Some(m) => group_items(&code[m.end()..])
                .into_iter()
                .map(|item| base.iter().map(|s| s.to_string()).chain(item).collect())
                .collect(),
        };
        for head in heads {
            if let Some(abs) = absolute(module, &head) {
                out.push(abs);
            }
        }
    }
    out
}

/// The first segments of each item of a `{ ... }` group (text after its `{`).
fn group_items(rest: &str) -> Vec<Vec<String>> {
    let mut items = vec![String::new()];
    let mut depth = 1;
    for ch in rest.chars() {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => items.push(String::new()),
            _ if depth == 1 => items.last_mut().unwrap().push(ch),
            _ => {}
        }
    }
    items
        .iter()
        .map(|i| {
            i.split("::")
                .map(|s| s.trim().trim_end_matches('{').trim().to_string())
                .take_while(|s| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_'))
                .filter(|s| s != "self")
                .collect::<Vec<_>>()
        })
        .filter(|i| !i.is_empty())
        .collect()
}

/// `crate::`, `super::` and `self::` resolved against the naming file's module.
fn absolute(module: &[String], path: &[String]) -> Option<Vec<String>> {
    let (first, rest) = path.split_first()?;
    let mut base: Vec<String> = match first.as_str() {
        "crate" => Vec::new(),
        "self" => module.to_vec(),
        "super" => module[..module.len().checked_sub(1)?].to_vec(),
        _ => return None,
    };
    let mut rest = rest.iter().peekable();
    while rest.peek().is_some_and(|s| *s == "super") {
        base.pop()?;
        rest.next();
    }
    base.extend(rest.cloned());
    Some(base)
}

/// For every folder (module with files of its own), which of its children name which
/// (a child's own descendants speak for it).
fn sibling_graphs() -> BTreeMap<String, Graph> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .filter_map(|f| module_path(&src, f).map(|m| (m, f.clone())))
        .collect();
    let mut graphs: BTreeMap<String, Graph> = BTreeMap::new();
    for (module, file) in &modules {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        for mut named in paths_named(module, &code) {
            // The module the path ends in (the item after it dropped).
            while !named.is_empty() && !modules.contains_key(&named) {
                named.pop();
            }
            let common = module
                .iter()
                .zip(&named)
                .take_while(|(a, b)| a == b)
                .count();
            if common < module.len() && common < named.len() {
                let parent = module[..common].join("::");
                let graph = graphs.entry(parent).or_default();
                graph
                    .entry(module[common].clone())
                    .or_default()
                    .insert(named[common].clone());
            }
        }
    }
    graphs
}

#[test]
fn no_folder_has_an_import_cycle_among_its_files() {
    let graphs = sibling_graphs();
    assert!(
        graphs.get("turn").is_some_and(|g| g.contains_key("writer")),
        "{graphs:?}"
    );
    let cycles: Vec<String> = graphs
        .iter()
        .filter_map(|(folder, g)| find_cycle(g).map(|c| format!("{folder}: {}", c.join(" -> "))))
        .collect();
    assert!(
        cycles.is_empty(),
        "import cycles among sibling files:\n{}",
        cycles.join("\n")
    );
}

/// The turn's writer is a leaf: it writes to its outlet and starts nothing (no run, stage,
/// follow-up or the turn's dependencies).
#[test]
fn the_turn_writer_starts_nothing() {
    let graphs = sibling_graphs();
    let named = &graphs["turn"]["writer"];
    for other in ["run", "stage", "follow_up", "deps", "reaper"] {
        assert!(!named.contains(other), "turn/writer.rs names turn/{other}");
    }
}

/// Every frame of a turn is built in the one mapper (`delivery/frames`): nothing under
/// `turn/`, `focus/` or `memories/` constructs a wire frame.
#[test]
fn turn_frames_are_built_in_the_mapper() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let built = regex::Regex::new(r"ServerMessage::\w+\((\w+ \{|Box::new|\w+::new)").unwrap();
    for dir in ["turn", "focus", "memories"] {
        let mut files = Vec::new();
        rust_files(&src.join(dir), &mut files);
        for file in files.iter().filter(|f| !f.ends_with("tests.rs")) {
            let code = code_of(&std::fs::read_to_string(file).unwrap());
            assert!(
                !built.is_match(&code),
                "{} builds a wire frame",
                file.display()
            );
        }
    }
}

#[test]
fn sibling_paths_resolve() {
    let module: Vec<String> = ["turn", "stage", "plan"].map(String::from).to_vec();
    let named = paths_named(
        &module,
        "use super::{Turn, steps::steps};\nuse crate::turn::{writer::Outlet, deps};\nsuper::super::run::x();",
    );
    let joined: Vec<String> = named.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        joined,
        [
            "turn::stage::Turn",
            "turn::stage::steps::steps",
            "turn::writer::Outlet",
            "turn::deps",
            "turn::run::x"
        ]
    );
}
