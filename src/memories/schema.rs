//! The JSON Schema subset a category's entry is written in: `type` (object, array, string,
//! integer, number, boolean), `properties`, `required`, `additionalProperties: false`,
//! `items`, `enum`, `minLength`/`maxLength`, `minimum`/`maximum`, `maxItems` and
//! `description`. [`lint`] rejects anything else, so a manifest never promises a check
//! chatd does not make; [`validate`] reports the first mismatch by its JSON path.

use serde_json::{Map, Value};

const KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "maxItems",
    "description",
    "title",
];

const TYPES: &[&str] = &["object", "array", "string", "integer", "number", "boolean"];

/// Checks that a schema uses only the supported subset and is well formed.
pub fn lint(schema: &Value) -> Result<(), String> {
    lint_at(schema, "$")
}

fn lint_at(schema: &Value, path: &str) -> Result<(), String> {
    let Some(obj) = schema.as_object() else {
        return Err(format!("at {path} must be an object"));
    };
    for k in obj.keys() {
        if !KEYWORDS.contains(&k.as_str()) {
            return Err(format!("at {path} uses unsupported keyword `{k}`"));
        }
    }
    let kind = obj.get("type").and_then(Value::as_str);
    match kind {
        Some(t) if TYPES.contains(&t) => {}
        Some(t) => return Err(format!("at {path} has unknown type `{t}`")),
        None => return Err(format!("at {path} needs a `type`")),
    }
    if let Some(props) = obj.get("properties") {
        let Some(props) = props.as_object() else {
            return Err(format!("at {path}: `properties` must be an object"));
        };
        for (name, sub) in props {
            lint_at(sub, &format!("{path}.{name}"))?;
        }
    }
    if let Some(req) = obj.get("required") {
        let names = req
            .as_array()
            .map(|a| a.iter().map(Value::as_str).collect::<Vec<_>>());
        let props = obj.get("properties").and_then(Value::as_object);
        match names {
            Some(names) if names.iter().all(Option::is_some) => {
                for n in names.into_iter().flatten() {
                    if !props.is_some_and(|p| p.contains_key(n)) {
                        return Err(format!("at {path}: required `{n}` is not a property"));
                    }
                }
            }
            _ => return Err(format!("at {path}: `required` must be a list of names")),
        }
    }
    if let Some(items) = obj.get("items") {
        lint_at(items, &format!("{path}[]"))?;
    }
    if let Some(e) = obj.get("enum")
        && !e.is_array()
    {
        return Err(format!("at {path}: `enum` must be a list"));
    }
    Ok(())
}

/// The first place `value` does not match `schema`, as `$.path: reason`.
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    validate_at(schema, value, "$")
}

fn validate_at(schema: &Value, value: &Value, path: &str) -> Result<(), String> {
    let empty = Map::new();
    let obj = schema.as_object().unwrap_or(&empty);
    if let Some(allowed) = obj.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        return Err(format!("{path}: not one of the allowed values"));
    }
    let kind = obj.get("type").and_then(Value::as_str).unwrap_or("object");
    let ok = match kind {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        _ => false,
    };
    if !ok {
        return Err(format!("{path}: expected {kind}"));
    }
    let num = |k: &str| obj.get(k).and_then(Value::as_f64);
    match value {
        Value::Object(fields) => {
            let props = obj.get("properties").and_then(Value::as_object);
            for name in obj
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !fields.contains_key(name) {
                    return Err(format!("{path}.{name}: required"));
                }
            }
            let closed = obj.get("additionalProperties") == Some(&Value::Bool(false));
            for (name, v) in fields {
                match props.and_then(|p| p.get(name)) {
                    Some(sub) => validate_at(sub, v, &format!("{path}.{name}"))?,
                    None if closed => return Err(format!("{path}.{name}: not allowed")),
                    None => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(max) = num("maxItems")
                && items.len() as f64 > max
            {
                return Err(format!("{path}: more than {max} items"));
            }
            if let Some(sub) = obj.get("items") {
                for (i, v) in items.iter().enumerate() {
                    validate_at(sub, v, &format!("{path}[{i}]"))?;
                }
            }
        }
        Value::String(s) => {
            let len = s.chars().count() as f64;
            if num("minLength").is_some_and(|m| len < m) {
                return Err(format!("{path}: too short"));
            }
            if num("maxLength").is_some_and(|m| len > m) {
                return Err(format!("{path}: too long"));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if num("minimum").is_some_and(|m| x < m) || num("maximum").is_some_and(|m| x > m) {
                return Err(format!("{path}: out of range"));
            }
        }
        _ => {}
    }
    Ok(())
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
    fn entries_are_checked_against_the_subset() {
        let s = trip();
        lint(&s).unwrap();
        validate(
            &s,
            &json!({"destination": "Lisbon", "nights": 3, "kind": "work"}),
        )
        .unwrap();
        let bad = [
            (json!({"nights": 3}), "$.destination: required"),
            (json!({"destination": 5}), "$.destination: expected string"),
            (json!({"destination": "a very long place"}), "too long"),
            (json!({"destination": "x", "nights": 0}), "out of range"),
            (
                json!({"destination": "x", "kind": "other"}),
                "allowed values",
            ),
            (
                json!({"destination": "x", "extra": 1}),
                "$.extra: not allowed",
            ),
            (
                json!({"destination": "x", "tags": ["a", "b", "c"]}),
                "more than",
            ),
            (json!("Lisbon"), "expected object"),
        ];
        for (v, want) in bad {
            let e = validate(&s, &v).unwrap_err();
            assert!(e.contains(want), "{e} should contain {want}");
        }
    }

    #[test]
    fn lint_rejects_what_is_not_checked() {
        assert!(
            lint(&json!({"type": "string", "pattern": "x"}))
                .unwrap_err()
                .contains("pattern")
        );
        assert!(
            lint(&json!({"type": "object", "required": ["a"]}))
                .unwrap_err()
                .contains("`a`")
        );
        assert!(
            lint(&json!({"properties": {}}))
                .unwrap_err()
                .contains("type")
        );
    }
}
