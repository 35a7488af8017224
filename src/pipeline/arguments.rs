//! A function call's arguments while they stream: the top-level members of the JSON object,
//! each handed out as soon as the text that closes it (`,` or `}` outside any string or
//! nested value) has arrived. Only the boundaries are found here; each member's text is
//! parsed by `serde_json`. Anything that is not one object (text before it, a bad member)
//! stops the scan: the caller then falls back to the whole reply.

use serde_json::{Map, Value};

#[derive(Debug, Default)]
pub struct Members {
    /// The arguments so far.
    text: String,
    /// How much of `text` was scanned.
    scanned: usize,
    /// Where the member being written starts (just after `{` or `,`).
    member_start: usize,
    /// Nesting below the top-level object (arrays and objects inside a member).
    depth: u32,
    in_string: bool,
    escaped: bool,
    state: State,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the opening `{`.
    #[default]
    Before,
    Open,
    /// The object was closed: every member was handed out.
    Closed,
    /// Not one well-formed object: nothing more is handed out.
    Broken,
}

impl Members {
    /// Takes the next fragment and returns the members it completed, in order.
    pub fn push(&mut self, fragment: &str) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        if matches!(self.state, State::Closed | State::Broken) {
            if self.state == State::Closed && !fragment.trim().is_empty() {
                self.state = State::Broken;
            }
            return out;
        }
        self.text.push_str(fragment);
        let bytes = self.text.as_bytes();
        // Structural characters are ASCII; UTF-8 continuation bytes never equal them.
        let mut i = self.scanned;
        while i < bytes.len() {
            let b = bytes[i];
            match self.state {
                State::Before => match b {
                    b'{' => {
                        self.state = State::Open;
                        self.member_start = i + 1;
                    }
                    b if b.is_ascii_whitespace() => {}
                    _ => self.state = State::Broken,
                },
                State::Open if self.in_string => {
                    if self.escaped {
                        self.escaped = false;
                    } else if b == b'\\' {
                        self.escaped = true;
                    } else if b == b'"' {
                        self.in_string = false;
                    }
                }
                State::Open => match b {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' if self.depth > 0 => self.depth -= 1,
                    b',' | b'}' if self.depth == 0 => {
                        let member = self.text[self.member_start..i].trim();
                        match parse_member(member, b == b'}') {
                            Ok(Some(kv)) => out.push(kv),
                            Ok(None) => {}
                            Err(()) => {
                                self.state = State::Broken;
                                break;
                            }
                        }
                        self.member_start = i + 1;
                        if b == b'}' {
                            self.state = State::Closed;
                        }
                    }
                    b']' => self.state = State::Broken,
                    _ => {}
                },
                State::Closed => {
                    if !b.is_ascii_whitespace() {
                        self.state = State::Broken;
                    }
                }
                State::Broken => break,
            }
            i += 1;
        }
        self.scanned = i;
        out
    }

    /// The object was closed and nothing but whitespace followed.
    pub fn is_complete(&self) -> bool {
        self.state == State::Closed
    }

    /// The text so far is not (the start of) one object.
    pub fn is_broken(&self) -> bool {
        self.state == State::Broken
    }

    /// Nothing arrived yet.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
}

/// One `"key": value` member; an empty one is allowed only as the whole of `{}`.
fn parse_member(text: &str, last: bool) -> Result<Option<(String, Value)>, ()> {
    if text.is_empty() {
        return if last { Ok(None) } else { Err(()) };
    }
    let object: Map<String, Value> =
        serde_json::from_str(&format!("{{{text}}}")).map_err(|_| ())?;
    match object.len() {
        1 => Ok(object.into_iter().next()),
        _ => Err(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ARGS: &str = r#" {"harm": 0, "tags": ["a,b", "c}"], "nested": {"x": [1, {"y": "\"}"}]},
        "title": "Rust \u00e9 ✓", "n": -1.5e3, "t": true, "z": null} "#;

    fn all_at_once(text: &str) -> Vec<(String, Value)> {
        Members::default().push(text)
    }

    #[test]
    fn members_come_out_in_order_as_each_closes() {
        let mut m = Members::default();
        assert!(m.push(r#"{"harm": 1"#).is_empty(), "a number may go on");
        assert_eq!(m.push(","), vec![("harm".into(), json!(1))]);
        assert!(m.push(r#" "title": "a, b"#).is_empty());
        assert_eq!(m.push(r#"" }"#), vec![("title".to_string(), json!("a, b"))]);
        assert!(m.is_complete());
    }

    #[test]
    fn every_split_gives_what_the_whole_text_gives() {
        let whole = all_at_once(ARGS);
        let expected: Map<String, Value> = serde_json::from_str(ARGS).unwrap();
        assert_eq!(whole.len(), expected.len());
        for (k, v) in &whole {
            assert_eq!(expected.get(k), Some(v), "{k}");
        }
        let chars: Vec<(usize, char)> = ARGS.char_indices().collect();
        for &(cut, _) in &chars {
            for &(cut2, _) in chars.iter().filter(|(i, _)| *i >= cut).step_by(7) {
                let mut m = Members::default();
                let mut got = m.push(&ARGS[..cut]);
                got.extend(m.push(&ARGS[cut..cut2]));
                got.extend(m.push(&ARGS[cut2..]));
                assert_eq!(got, whole, "cut at {cut} and {cut2}");
                assert!(m.is_complete());
            }
        }
    }

    #[test]
    fn anything_but_one_object_stops_the_scan() {
        for bad in [
            "[1, 2]",
            "text {\"a\": 1}",
            "{\"a\": 1,, \"b\": 2}",
            "{\"a\" 1}",
            "{\"a\": 1]",
            "{\"a\": 1} trailing",
            "{\"a\": 1, \"b\": 2, \"c\"}",
        ] {
            let mut m = Members::default();
            let _ = m.push(bad);
            assert!(m.is_broken() && !m.is_complete(), "{bad}");
        }
        let mut m = Members::default();
        assert_eq!(m.push("{\"a\": 1,"), vec![("a".into(), json!(1))]);
        assert!(m.push("oops}").is_empty());
        assert!(m.is_broken());
    }

    #[test]
    fn an_empty_object_and_an_unfinished_one() {
        let mut m = Members::default();
        assert!(m.push(" { } ").is_empty());
        assert!(m.is_complete());
        let mut m = Members::default();
        assert_eq!(m.push("{\"a\": 1, \"b\": "), vec![("a".into(), json!(1))]);
        assert!(!m.is_complete() && !m.is_broken() && !m.is_empty());
    }
}
