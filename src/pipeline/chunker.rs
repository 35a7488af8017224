//! Re-chunks a streamed answer into paragraphs: a chunk ends at a blank line, or at the
//! end of a fenced code block (a code block is always one chunk, blank lines inside it do
//! not split it). A buffer over `max_pending` bytes is flushed at the last line end.
//! The same chunker feeds streaming frames and link checking.

use std::ops::Range;

pub const DEFAULT_MAX_PENDING: usize = 32 * 1024;

#[derive(Debug)]
pub struct ParagraphChunker {
    text: String,
    /// End of the text already handed out as complete paragraphs.
    emitted: usize,
    /// Start of the first line not yet scanned.
    scanned: usize,
    in_fence: bool,
    max_pending: usize,
}

impl Default for ParagraphChunker {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_PENDING)
    }
}

impl ParagraphChunker {
    pub fn new(max_pending: usize) -> Self {
        Self {
            text: String::new(),
            emitted: 0,
            scanned: 0,
            in_fence: false,
            max_pending: max_pending.max(64),
        }
    }

    /// All text received so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Appends a delta; returns the ranges of the paragraphs it completed, in order.
    pub fn push(&mut self, delta: &str) -> Vec<Range<usize>> {
        self.text.push_str(delta);
        let mut done = Vec::new();
        let mut boundary = None;
        while let Some(nl) = self.text[self.scanned..].find('\n') {
            let line_start = self.scanned;
            let line_end = self.scanned + nl + 1;
            let line = &self.text[line_start..line_end];
            self.scanned = line_end;
            let fence = line.trim_start().starts_with("```");
            let ends_paragraph = if fence {
                self.in_fence = !self.in_fence;
                !self.in_fence
            } else {
                !self.in_fence && line.trim().is_empty()
            };
            if ends_paragraph {
                done.extend(self.take_until(line_end));
            }
        }
        if self.text.len() - self.emitted > self.max_pending {
            boundary = Some(if self.scanned > self.emitted {
                self.scanned
            } else {
                self.text.len()
            });
            if boundary == Some(self.text.len()) {
                self.scanned = self.text.len();
            }
        }
        if let Some(end) = boundary {
            done.extend(self.take_until(end));
        }
        done
    }

    /// The stream ended: whatever is left is the last paragraph.
    pub fn finish(&mut self) -> Option<Range<usize>> {
        self.scanned = self.text.len();
        self.take_until(self.text.len())
    }

    fn take_until(&mut self, end: usize) -> Option<Range<usize>> {
        if end <= self.emitted || self.text[self.emitted..end].trim().is_empty() {
            return None;
        }
        let range = self.emitted..end;
        self.emitted = end;
        Some(range)
    }
}

#[cfg(test)]
mod tests;
