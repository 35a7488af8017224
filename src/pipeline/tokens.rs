//! Token accounting. Counts are taken once per message when it is cached and stored with
//! it, so a turn only counts what is new.
//! Interim estimate (about four bytes of text per token, the usual rule for English BPE
//! vocabularies); the pipeline issue swaps in exact per-model encodings.

/// Estimated tokens of `text` (at least 1 for non-empty text).
pub fn count(text: &str) -> u32 {
    let bytes = text.len();
    if bytes == 0 {
        return 0;
    }
    u32::try_from(bytes.div_ceil(4)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    #[test]
    fn estimate_is_monotonic_and_nonzero() {
        assert_eq!(super::count(""), 0);
        assert_eq!(super::count("hi"), 1);
        assert!(super::count(&"word ".repeat(100)) >= 100);
    }
}
