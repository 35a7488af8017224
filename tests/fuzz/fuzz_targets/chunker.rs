//! The paragraph chunker: never panics; fed the input in arbitrary deltas, its chunks are
//! consecutive and concatenate to a prefix of the input, and what is left after `finish`
//! is only whitespace.
#![no_main]

use chatd::pipeline::chunker::ParagraphChunker;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&knobs, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    // Low bits: the pending limit (64..=1024 bytes); high bits: the delta size.
    let max_pending = 64 + usize::from(knobs & 0x0f) * 64;
    let step = 1 + usize::from(knobs >> 4) * 3;
    let mut chunker = ParagraphChunker::new(max_pending);
    let mut ranges = Vec::new();
    let mut at = 0;
    while at < text.len() {
        let mut end = (at + step).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        ranges.extend(chunker.push(&text[at..end]));
        at = end;
    }
    assert_eq!(chunker.text(), text);
    ranges.extend(chunker.finish());
    let mut joined = String::new();
    let mut expected_start = 0;
    for r in &ranges {
        assert_eq!(
            r.start, expected_start,
            "chunks are not consecutive: {ranges:?}"
        );
        assert!(r.end > r.start);
        joined.push_str(&text[r.clone()]);
        expected_start = r.end;
    }
    assert!(text.starts_with(&joined));
    assert!(
        text[joined.len()..].trim().is_empty(),
        "text left over after finish"
    );
});
