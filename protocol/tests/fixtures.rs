//! Golden fixtures: one JSON frame per message type in `protocol/fixtures/{client,server}/`.
//! Each must exist, parse into the right variant, and serialize back to the same JSON value,
//! so a renamed field or a changed default shows up as a failing fixture. Also checks the
//! fixtures against the committed schema and the error codes against `protocol/README.md`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use chatd_protocol::{ClientMessage, ErrorCode, ServerMessage, parse_client_message};
use serde_json::Value;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture_dir(side: &str) -> PathBuf {
    crate_dir().join("fixtures").join(side)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&read(path))
        .unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", path.display()))
}

/// Requires exactly one `<type>.json` per wire type in `dir`, and nothing else.
fn assert_one_fixture_per_type(side: &str, types: &[&str]) {
    let dir = fixture_dir(side);
    let expected: BTreeSet<String> = types.iter().map(|t| format!("{t}.json")).collect();
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    let missing: Vec<_> = expected.difference(&present).collect();
    let extra: Vec<_> = present.difference(&expected).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "fixtures/{side}/ must hold one <type>.json per message type\n  missing: {missing:?}\n  \
         not a {side} message type: {extra:?}"
    );
}

#[test]
fn every_client_type_has_exactly_one_fixture() {
    assert_one_fixture_per_type("client", ClientMessage::TYPES);
}

#[test]
fn every_server_type_has_exactly_one_fixture() {
    assert_one_fixture_per_type("server", ServerMessage::TYPES);
}

#[test]
fn client_fixtures_parse_and_round_trip() {
    for name in ClientMessage::TYPES {
        let path = fixture_dir("client").join(format!("{name}.json"));
        let text = read(&path);
        let msg = parse_client_message(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()));
        assert_eq!(msg.type_name(), *name, "{}", path.display());
        let back = serde_json::to_value(&msg).unwrap();
        assert_eq!(
            back,
            json(&path),
            "{} does not round-trip: the serializer writes the left value",
            path.display()
        );
    }
}

#[test]
fn server_fixtures_parse_and_round_trip() {
    for name in ServerMessage::TYPES {
        let path = fixture_dir("server").join(format!("{name}.json"));
        let msg: ServerMessage = serde_json::from_str(&read(&path))
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()));
        assert_eq!(msg.type_name(), *name, "{}", path.display());
        // `to_json` is what the server writes to the socket.
        let back: Value = serde_json::from_str(&msg.to_json()).unwrap();
        assert_eq!(
            back,
            json(&path),
            "{} does not round-trip: the serializer writes the left value",
            path.display()
        );
    }
}

/// The `const` values of the schema's top-level `oneOf` branches for `type`.
fn schema_types(file: &str) -> BTreeSet<String> {
    let schema = json(&crate_dir().join("schema").join(file));
    schema["oneOf"]
        .as_array()
        .unwrap_or_else(|| panic!("{file} has no top-level oneOf"))
        .iter()
        .map(|branch| {
            branch["properties"]["type"]["const"]
                .as_str()
                .unwrap_or_else(|| panic!("{file}: a oneOf branch has no const `type`"))
                .to_string()
        })
        .collect()
}

#[test]
fn every_fixture_type_is_in_the_schema() {
    for (side, file) in [
        ("client", "client.schema.json"),
        ("server", "server.schema.json"),
    ] {
        let types = schema_types(file);
        for entry in std::fs::read_dir(fixture_dir(side)).unwrap() {
            let path = entry.unwrap().path();
            let fixture = json(&path);
            let kind = fixture["type"]
                .as_str()
                .unwrap_or_else(|| panic!("{} has no string `type`", path.display()));
            assert!(
                types.contains(kind),
                "{}: type `{kind}` is not in schema/{file}",
                path.display()
            );
        }
    }
}

fn wire_name(code: ErrorCode) -> String {
    match serde_json::to_value(code).unwrap() {
        Value::String(s) => s,
        other => panic!("{code:?} serializes to {other}, not a string"),
    }
}

#[test]
fn error_codes_are_unique_snake_case_and_complete() {
    let mut seen = HashSet::new();
    for &code in ErrorCode::ALL {
        let name = wire_name(code);
        let snake = name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && !name.ends_with('_')
            && !name.contains("__");
        assert!(snake, "error code `{name}` is not snake_case");
        assert_eq!(name, code.as_str(), "{code:?}: as_str differs from serde");
        assert!(
            seen.insert(name.clone()),
            "error code `{name}` appears twice"
        );
    }
    // The schema is derived from the enum itself, so it names every variant: `ALL` must too.
    let schema = json(&crate_dir().join("schema").join("server.schema.json"));
    let in_schema: BTreeSet<String> = schema["$defs"]["ErrorCode"]["oneOf"]
        .as_array()
        .expect("ErrorCode in server.schema.json has a oneOf")
        .iter()
        .map(|v| v["const"].as_str().unwrap().to_string())
        .collect();
    let in_all: BTreeSet<String> = seen.into_iter().collect();
    assert_eq!(in_all, in_schema, "ErrorCode::ALL misses a variant");
}

#[test]
fn readme_lists_every_error_code_and_message_type() {
    let readme = read(&crate_dir().join("README.md"));
    for &code in ErrorCode::ALL {
        let name = wire_name(code);
        assert!(
            readme.contains(&format!("`{name}`")),
            "protocol/README.md does not document error code `{name}`"
        );
    }
    for kind in ClientMessage::TYPES.iter().chain(ServerMessage::TYPES) {
        assert!(
            readme.contains(&format!("`{kind}`")),
            "protocol/README.md does not document message type `{kind}`"
        );
    }
}
