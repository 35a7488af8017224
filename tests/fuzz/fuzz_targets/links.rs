//! The markdown link extractor: never panics; every link found is a `[text](http...)` slice
//! of the input, links come in order without overlapping; rewriting no link gives the text
//! back.
#![no_main]

use chatd::links::extract::{links, replace_broken};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut fence = false;
    let found = links(text, &mut fence);
    let mut last = 0;
    for link in &found {
        assert!(link.span.start >= last, "links overlap or go backwards");
        let whole = &text[link.span.clone()];
        assert!(whole.starts_with('[') && whole.ends_with(')'), "{whole:?}");
        assert_eq!(
            &text[link.span.start + 1..link.span.start + 1 + link.text.len()],
            link.text
        );
        let scheme = link.url.get(..8).unwrap_or(link.url).to_ascii_lowercase();
        assert!(
            scheme.starts_with("http://") || scheme.starts_with("https://"),
            "{link:?}"
        );
        assert!(whole.contains(link.url));
        last = link.span.end;
    }
    let (same, replaced) = replace_broken(text, "https://s.example/?q={query}", |_| false);
    assert_eq!(same, text);
    assert!(replaced.is_empty());
    let (_, replaced) = replace_broken(text, "https://s.example/?q={query}", |_| true);
    assert_eq!(replaced.len(), found.len());
});
