//! TOON decoding of arbitrary text (the embed contents and skill results chatd decodes come
//! from outside): never panics; what decodes encodes again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(value) = toon_format::decode_default::<Value>(text) {
        let _ = chatd::pipeline::tools::toon(&value);
    }
});
