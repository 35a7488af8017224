//! TOON encoding of tool results (`pipeline::tools::toon`): never panics on any JSON value,
//! and never returns an empty text for a non-empty value.
#![no_main]

use chatd::pipeline::tools::toon;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let text = toon(&value);
    let empty = match &value {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    };
    if !empty {
        assert!(!text.is_empty(), "{value} encoded to nothing");
    }
});
