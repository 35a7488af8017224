//! The shape targets of `src/` (style.md, ARCHITECTURE.md): no source file over 400 lines
//! and no function over 80 (unit tests, in `tests.rs` files, may be longer where a table of
//! cases reads best).

use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 400;
const MAX_FN_LINES: usize = 80;

fn sources() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    walk(&root.join("src"), &mut out);
    walk(&root.join("protocol/src"), &mut out);
    out
}

/// Each function with a body: its name and length in lines (signature to closing brace, the
/// brace at the signature's indentation).
fn functions(text: &str) -> Vec<(String, usize)> {
    let head = regex::Regex::new(
        r"^(\s*)(?:pub(?:\([^)]*\))? )?(?:const )?(?:async )?(?:unsafe )?fn (\w+)",
    )
    .unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(c) = head.captures(line) else {
            continue;
        };
        let indent = c[1].len();
        // The signature ends at `{` (a body) or `;` (a declaration).
        let Some(open) = (i..lines.len()).find(|&k| {
            let t = lines[k].trim_end();
            t.ends_with('{') || t.ends_with(';')
        }) else {
            continue;
        };
        if lines[open].trim_end().ends_with(';') {
            continue;
        }
        let close = (open + 1..lines.len()).find(|&k| {
            let l = lines[k];
            l.len() - l.trim_start().len() == indent && l.trim_start().starts_with('}')
        });
        if let Some(close) = close {
            out.push((c[2].to_string(), close - i + 1));
        }
    }
    out
}

#[test]
fn no_source_file_is_over_400_lines() {
    let long: Vec<String> = sources()
        .into_iter()
        .filter_map(|p| {
            let n = std::fs::read_to_string(&p).unwrap().lines().count();
            (n > MAX_FILE_LINES).then(|| format!("{} ({n})", p.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines: {long:#?}"
    );
}

#[test]
fn no_function_is_over_80_lines() {
    let mut long = Vec::new();
    for p in sources() {
        let text = std::fs::read_to_string(&p).unwrap();
        for (name, n) in functions(&text) {
            if n > MAX_FN_LINES {
                long.push(format!("{}::{name} ({n})", p.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines: {long:#?}"
    );
}

#[test]
fn the_function_reader_measures_bodies_and_skips_declarations() {
    let text = "fn a() {\n    x();\n}\ntrait T {\n    fn b(&self)\n        -> u8;\n}\n    pub async fn c(\n        y: u8,\n    ) {\n        z();\n    }\n";
    assert_eq!(
        functions(text),
        [("a".to_string(), 3), ("c".to_string(), 5)]
    );
}
