//! The provider SSE parser: never panics; whatever the body, the events end with exactly one
//! `Done` or error, last; text and reasoning deltas are never empty.
#![no_main]

use chatd::fuzzing::openai_sse;
use chatd::llm::LlmEvent;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&step, body)) = data.split_first() else {
        return;
    };
    // The body arrives in pieces of `step` bytes (split anywhere, even inside a character).
    let step = usize::from(step).max(1);
    let chunks: Vec<Vec<u8>> = body.chunks(step).map(<[u8]>::to_vec).collect();
    let events = openai_sse(chunks).expect("a current-thread runtime");
    let Some((last, before)) = events.split_last() else {
        panic!("no event at all: the stream must end with Done or an error");
    };
    assert!(
        matches!(last, Err(_) | Ok(LlmEvent::Done { .. })),
        "{last:?}"
    );
    for e in before {
        match e {
            Ok(LlmEvent::Done { .. }) | Err(_) => panic!("event after the end: {events:?}"),
            Ok(LlmEvent::TextDelta(t)) | Ok(LlmEvent::ReasoningDelta(t)) => {
                assert!(!t.is_empty())
            }
            Ok(_) => {}
        }
    }
});
