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
