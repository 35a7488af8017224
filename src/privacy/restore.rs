//! Restoring placeholders in a stream: a placeholder may arrive split over several chunks
//! (`[EMA` + `IL_1]`), so the end of the text that could still become one is held back
//! until the next chunk, or the end of the stream, decides it.

use super::{ChatPrivacy, MAX_PLACEHOLDER};

/// One streamed text's restoration (an answer, its reasoning, one call's arguments).
#[derive(Debug, Default)]
pub struct Restorer {
    held: String,
    /// The text is JSON (a function call's arguments): values are restored escaped.
    json: bool,
}

impl Restorer {
    pub fn json() -> Self {
        Self {
            held: String::new(),
            json: true,
        }
    }

    /// What of the text so far can go on, restored; a possible placeholder's start stays.
    pub fn push(&mut self, privacy: &ChatPrivacy, delta: &str) -> String {
        self.held.push_str(delta);
        let cut = open_placeholder(&self.held);
        if cut == 0 {
            return String::new();
        }
        let ready: String = self.held.drain(..cut).collect();
        privacy.reveal(&ready, self.json)
    }

    /// The rest at the end of the stream.
    pub fn finish(&mut self, privacy: &ChatPrivacy) -> String {
        let rest = std::mem::take(&mut self.held);
        privacy.reveal(&rest, self.json)
    }
}

/// Where a trailing, not yet closed placeholder starts in `text` (its length when none).
fn open_placeholder(text: &str) -> usize {
    let Some(open) = text.rfind('[') else {
        return text.len();
    };
    let tail = &text[open + 1..];
    let could_be = tail.len() < MAX_PLACEHOLDER
        && tail
            .bytes()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_');
    if could_be { open } else { text.len() }
}
