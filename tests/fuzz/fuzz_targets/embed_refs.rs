//! Embed reference parsing: never panics; references come in order, each a fenced block of
//! the input; substituting them with themselves gives the input back; rendering an embed
//! whose (client-supplied) content is the input never panics.
#![no_main]

use chatd::cache::ai::CachedEmbed;
use chatd::history::embed_refs::{find, missing, render, substitute};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let refs = find(text);
    let mut last = 0;
    for r in &refs {
        assert!(r.range.start >= last, "references overlap");
        let block = &text[r.range.clone()];
        assert!(block.trim_start().starts_with("```json"), "{block:?}");
        assert!(block.trim_end().ends_with("```"), "{block:?}");
        last = r.range.end;
        let _ = missing(r);
    }
    let same = substitute(text, &refs, |r| text[r.range.clone()].to_string());
    assert_eq!(same, text);
    let embed = CachedEmbed {
        embed_type: "web_page".into(),
        content: text.to_string(),
        status: None,
        version_number: 1,
    };
    let _ = render(&embed);
});
