//! Thin entry points for the fuzz targets in `tests/fuzz` (see README, "Fuzzing"). Hidden
//! from the documentation and not part of the API: they only reach code that is private
//! otherwise, and may change with it.

use crate::llm::{LlmError, LlmEvent};

/// The [`LlmEvent`]s (or the error that ends them) an OpenAI-compatible provider's SSE
/// response body turns into, the body arriving in `chunks`. Runs on its own
/// current-thread runtime; fails only if that runtime cannot be built.
pub fn openai_sse(chunks: Vec<Vec<u8>>) -> std::io::Result<Vec<Result<LlmEvent, LlmError>>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    Ok(runtime.block_on(crate::llm::openai::events_of_body(chunks)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_sse_reads_a_body_split_anywhere() {
        let body =
            "data: {\"choices\":[{\"delta\":{\"content\":\"h\u{e9}\"}}]}\n\ndata: [DONE]\n\n";
        let at = body.find('\u{e9}').unwrap() + 1; // inside the two-byte character
        let (a, b) = body.as_bytes().split_at(at);
        let events = openai_sse(vec![a.to_vec(), b.to_vec()]).unwrap();
        assert!(matches!(&events[0], Ok(LlmEvent::TextDelta(t)) if t == "h\u{e9}"));
        assert!(matches!(events.last(), Some(Ok(LlmEvent::Done { .. }))));
        let cut = openai_sse(vec![a.to_vec()]).unwrap();
        assert!(matches!(cut.last(), Some(Err(LlmError::Stream(_)))));
    }
}
