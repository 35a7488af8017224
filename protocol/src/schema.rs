//! JSON Schema of the wire protocol, generated from [`ClientMessage`] and [`ServerMessage`].
//! The committed copies live in `protocol/schema/`; `tests/schema.rs` fails when they drift
//! (`CHATD_BLESS=1` rewrites them). This is the only place that renders them.

use crate::{ClientMessage, ServerMessage};
use serde_json::{Map, Value};

/// Every schema file as `(file name, content)`: pretty-printed JSON with a trailing newline.
///
/// Object keys are sorted so the text does not depend on whether some other crate in the
/// build enables serde_json's `preserve_order` feature (feature unification would otherwise
/// change the output between `cargo test -p chatd-protocol` and a workspace build).
pub fn schemas() -> Vec<(&'static str, String)> {
    vec![
        (
            "client.schema.json",
            render(schemars::schema_for!(ClientMessage)),
        ),
        (
            "server.schema.json",
            render(schemars::schema_for!(ServerMessage)),
        ),
    ]
}

fn render(schema: schemars::Schema) -> String {
    format!("{:#}\n", sorted(schema.to_value()))
}

fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, sorted(v)))
                    .collect::<Map<String, Value>>(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}
