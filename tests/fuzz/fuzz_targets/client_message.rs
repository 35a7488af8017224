//! The inbound frame decoder: never panics; a frame that parses serializes back to JSON
//! that parses to the same message.
#![no_main]

use chatd_protocol::parse_client_message;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_client_message(text) {
        Ok(message) => {
            let json = serde_json::to_string(&message).expect("a parsed message serializes");
            let again = parse_client_message(&json)
                .unwrap_or_else(|e| panic!("re-parse of {json} failed: {e}"));
            assert_eq!(again, message, "round trip changed the message: {json}");
        }
        Err(e) => {
            let _ = e.code();
        }
    }
});
