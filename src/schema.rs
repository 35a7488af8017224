//! JSON Schema, through the `jsonschema` crate: [`lint`] checks a schema a manifest declares
//! (a category's entry, a routine's arguments) when the manifest loads; [`validate`] checks
//! a value against it when one arrives, reporting the first mismatch at its JSON path
//! (`$.destination: ...`). Schemas never fetch anything: references resolve only inside the
//! schema itself.

use serde_json::Value;

/// Checks that `schema` is a valid JSON Schema (against its draft's meta-schema) and can be
/// compiled.
pub fn lint(schema: &Value) -> Result<(), String> {
    if !schema.is_object() {
        return Err("must be an object".into());
    }
    jsonschema::meta::validate(schema).map_err(|e| at(&e))?;
    jsonschema::validator_for(schema)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Checks `value` against `schema`: the first mismatch, as `$.path: what is wrong`.
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    let validator = jsonschema::validator_for(schema).map_err(|e| format!("$: bad schema: {e}"))?;
    match validator.iter_errors(value).next() {
        None => Ok(()),
        Some(e) => Err(at(&e)),
    }
}

/// `$.a.b: message` from a JSON pointer (`/a/b`).
fn at(e: &jsonschema::ValidationError<'_>) -> String {
    let pointer = e.instance_path().as_str().to_string();
    let path: String = pointer
        .split('/')
        .skip(1)
        .map(|segment| format!(".{}", segment.replace("~1", "/").replace("~0", "~")))
        .collect();
    format!("${path}: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn trip() -> Value {
        json!({"type": "object", "additionalProperties": false, "required": ["destination"],
               "properties": {"destination": {"type": "string", "maxLength": 10},
                              "nights": {"type": "integer", "minimum": 1},
                              "kind": {"type": "string", "enum": ["work", "leisure"]},
                              "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}}})
    }

    #[test]
    fn values_are_checked_and_mismatches_named_by_path() {
        let s = trip();
        lint(&s).unwrap();
        validate(
            &s,
            &json!({"destination": "Lisbon", "nights": 3, "kind": "work"}),
        )
        .unwrap();
        let bad = [
            (
                json!({"nights": 3}),
                "$: \"destination\" is a required property",
            ),
            (
                json!({"destination": 5}),
                "$.destination: 5 is not of type \"string\"",
            ),
            (
                json!({"destination": "a very long place"}),
                "$.destination:",
            ),
            (json!({"destination": "x", "nights": 0}), "$.nights:"),
            (json!({"destination": "x", "kind": "other"}), "$.kind:"),
            (json!({"destination": "x", "extra": 1}), "extra"),
            (
                json!({"destination": "x", "tags": ["a", "b", "c"]}),
                "$.tags:",
            ),
            (json!({"destination": "x", "tags": [1]}), "$.tags.0:"),
            (json!("Lisbon"), "$: \"Lisbon\" is not of type \"object\""),
        ];
        for (v, want) in bad {
            let e = validate(&s, &v).unwrap_err();
            assert!(e.contains(want), "{e} should contain {want}");
        }
        // Keywords past any hand-written subset work too.
        let pattern = json!({"type": "string", "pattern": "^[A-Z]{3}$"});
        lint(&pattern).unwrap();
        validate(&pattern, &json!("LIS")).unwrap();
        assert!(validate(&pattern, &json!("Lisbon")).is_err());
    }

    #[test]
    fn lint_rejects_schemas_that_are_not_json_schema() {
        assert!(lint(&json!({"type": "strnig"})).is_err());
        assert!(lint(&json!({"required": "a"})).is_err());
        assert!(lint(&json!({"minimum": "one"})).is_err());
        assert!(lint(&json!("string")).is_err());
    }
}
