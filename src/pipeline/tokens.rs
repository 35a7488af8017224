//! Token accounting with the OpenAI encodings per model family (counted by `bpe-openai`;
//! tiktoken names the family of a model and is the reference the counts are tested against). Counts are taken once per
//! message when it is cached and stored with it, so a turn only counts what is new; large
//! batches are counted on the blocking pool, off the async reactor. A message cached
//! uncounted (a large re-sent history) is bounded by its byte length — a byte-level BPE
//! token covers at least one byte — and counted exactly only when a budget decision cannot be
//! settled by the bounds ([`Tokens`], [`exact`]).
//! Splitting helpers cut by token budget on message boundaries, and a message that alone
//! exceeds the budget on paragraph boundaries.

use std::ops::Range;

use super::HistoryEntry;

use tiktoken_rs::tokenizer::Tokenizer;

/// A BPE vocabulary family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// GPT-4 / GPT-3.5 family; also the estimate for open models without their own vocabulary here.
    Cl100k,
    /// GPT-4o / o-series family.
    O200k,
}

impl Encoding {
    /// The family of a model name (unknown models count with `Cl100k`).
    pub fn for_model(model: &str) -> Encoding {
        match tiktoken_rs::tokenizer::get_tokenizer(model) {
            Some(Tokenizer::O200kBase | Tokenizer::O200kHarmony) => Encoding::O200k,
            _ => Encoding::Cl100k,
        }
    }

    /// Counts with GitHub's `bpe` tokenizers (the same vocabularies and results as
    /// tiktoken, several times faster; checked against tiktoken in the tests below).
    fn tokenizer(self) -> &'static bpe_openai::Tokenizer {
        match self {
            Encoding::Cl100k => bpe_openai::cl100k_base(),
            Encoding::O200k => bpe_openai::o200k_base(),
        }
    }

    pub fn count(self, text: &str) -> u32 {
        if text.is_empty() {
            return 0;
        }
        u32::try_from(self.tokenizer().count(text)).unwrap_or(u32::MAX)
    }
}

/// The encoding of the counts stored with cached messages.
pub const STORED: Encoding = Encoding::Cl100k;

/// Below this many bytes a batch is counted inline (faster than a hop to the blocking pool).
const INLINE_BYTES: usize = 8 * 1024;

/// Tokens of `text` in the stored encoding. CPU-bound: for large texts prefer [`count_many`].
pub fn count(text: &str) -> u32 {
    STORED.count(text)
}

/// Counts each text, on the blocking pool when the batch is large.
pub async fn count_many(texts: Vec<String>) -> Vec<u32> {
    let bytes: usize = texts.iter().map(String::len).sum();
    if bytes <= INLINE_BYTES {
        return texts.iter().map(|t| count(t)).collect();
    }
    // Should the blocking pool fail, each text's byte length still bounds its count.
    let fallback: Vec<u32> = texts
        .iter()
        .map(|t| u32::try_from(t.len()).unwrap_or(u32::MAX))
        .collect();
    tokio::task::spawn_blocking(move || texts.iter().map(|t| count(t)).collect())
        .await
        .unwrap_or(fallback)
}

/// Tokens of `text` counted on the blocking pool when it is large.
pub async fn count_one(text: &str) -> u32 {
    if text.len() <= INLINE_BYTES {
        return count(text);
    }
    count_many(vec![text.to_string()])
        .await
        .first()
        .copied()
        .unwrap_or(0)
}

/// The longest prefix of `text` made of at most `max` of its tokens (stored encoding),
/// ending on a character boundary. CPU-bound like [`count`]: for short texts.
pub fn prefix(text: &str, max: u32) -> &str {
    let tokenizer = STORED.tokenizer();
    let tokens = tokenizer.encode(text);
    let mut n = tokens.len().min(max as usize);
    if n == tokens.len() {
        return text;
    }
    // A cut inside a character's bytes does not decode: one token fewer, until it does.
    while n > 0 {
        if let Some(cut) = tokenizer.decode(&tokens[..n]) {
            return text.get(..cut.len()).filter(|t| *t == cut).unwrap_or("");
        }
        n -= 1;
    }
    ""
}

/// A message's size in tokens: counted, or bounded by its byte length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tokens {
    Counted(u32),
    AtMost(u32),
}

impl Tokens {
    /// The count when known, else the byte-length bound of `text`.
    pub fn of(text: &str, counted: Option<u32>) -> Tokens {
        match counted {
            Some(n) => Tokens::Counted(n),
            None => Tokens::AtMost(u32::try_from(text.len()).unwrap_or(u32::MAX)),
        }
    }

    /// An upper bound (the count itself when known).
    pub fn bound(self) -> u32 {
        match self {
            Tokens::Counted(n) | Tokens::AtMost(n) => n,
        }
    }
}

/// Each history message's upper bound (its count when known).
pub fn bounds(history: &[HistoryEntry]) -> Vec<u32> {
    history.iter().map(|h| h.tokens.bound()).collect()
}

/// Each history message's exact count: the uncounted ones are counted now (on the blocking
/// pool when large).
pub async fn exact(history: &[HistoryEntry]) -> Vec<u32> {
    let missing: Vec<String> = history
        .iter()
        .filter(|h| matches!(h.tokens, Tokens::AtMost(_)))
        .map(|h| h.content.clone())
        .collect();
    let mut counted = count_many(missing).await.into_iter();
    history
        .iter()
        .map(|h| match h.tokens {
            Tokens::Counted(n) => n,
            Tokens::AtMost(bound) => counted.next().unwrap_or(bound),
        })
        .collect()
}

/// A cheap upper-bound estimate (about four bytes per token), for when counting failed.
pub fn estimate(text: &str) -> u32 {
    u32::try_from(text.len().div_ceil(4)).unwrap_or(u32::MAX)
}

/// Splits items with the given token counts into consecutive ranges of at most `budget`
/// tokens each, on item boundaries. An item larger than the budget gets a range of its own
/// (split it further with [`split_text`]).
pub fn split_by_budget(counts: &[u32], budget: u32) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut used: u64 = 0;
    for (i, &c) in counts.iter().enumerate() {
        let c = u64::from(c);
        if i > start && used + c > u64::from(budget) {
            out.push(start..i);
            start = i;
            used = 0;
        }
        used += c;
    }
    if start < counts.len() {
        out.push(start..counts.len());
    }
    out
}

/// Splits one text into pieces of at most `budget` tokens on paragraph boundaries (blank
/// lines); a single paragraph over the budget is cut on line, then on word boundaries.
pub fn split_text(text: &str, budget: u32) -> Vec<String> {
    if count(text) <= budget {
        return vec![text.to_string()];
    }
    for separator in ["\n\n", "\n", " "] {
        let parts: Vec<&str> = text.split(separator).collect();
        if parts.len() < 2 {
            continue;
        }
        let counts: Vec<u32> = parts.iter().map(|p| count(p)).collect();
        let mut pieces = Vec::new();
        for range in split_by_budget(&counts, budget) {
            push_piece(&parts[range], separator, budget, &mut pieces);
        }
        return pieces;
    }
    vec![text.to_string()]
}

/// Joins `parts`; a join over the budget (the separators count too) is halved until it
/// fits, and a single part over it is cut on the next, finer boundary. Every step works on
/// a strictly smaller text, so it ends.
fn push_piece(parts: &[&str], separator: &str, budget: u32, out: &mut Vec<String>) {
    let piece = parts.join(separator);
    if separator == " " || count(&piece) <= budget {
        out.push(piece);
    } else if parts.len() > 1 {
        let (first, rest) = parts.split_at(parts.len() / 2);
        push_piece(first, separator, budget, out);
        push_piece(rest, separator, budget, out);
    } else {
        out.extend(split_text(&piece, budget));
    }
}

#[cfg(test)]
mod tests {
    use super::super::HistoryRole;
    use super::*;

    #[tokio::test]
    async fn bounds_hold_and_only_uncounted_texts_are_counted() {
        let texts = [
            "hello world",
            "naïve café — ünïcödé ✓ 数字",
            "stale stored count",
        ];
        for t in texts {
            assert!(count(t) <= Tokens::of(t, None).bound(), "{t}");
        }
        let entry = |text: &str, tokens| HistoryEntry {
            role: HistoryRole::User,
            content: text.into(),
            created_at: 0,
            tokens,
        };
        let history = [
            entry(texts[0], Tokens::of(texts[0], None)),
            entry(texts[1], Tokens::of(texts[1], None)),
            entry(texts[2], Tokens::Counted(99)),
        ];
        let exact = exact(&history).await;
        assert_eq!(exact, vec![count(texts[0]), count(texts[1]), 99]);
    }

    #[test]
    fn counts_match_tiktoken() {
        let texts = [
            "hello world",
            "naïve café — ünïcödé ✓ 数字 and emoji 🚀🚀",
            "fn main() {\n    println!(\"{}\", 1 + 2);\n}\n\n\n",
            "   leading and trailing spaces   \t\r\n",
            "URLs: https://example.com/a?b=c&d=e#f and numbers 1234567890 3.14159",
            "I'm sure they'll say you've done it — ISN'T IT? 'quoted' \"double\"",
        ];
        let long = texts.join("\n\n").repeat(50);
        for t in texts.iter().copied().chain([long.as_str()]) {
            let cl = tiktoken_rs::cl100k_base_singleton()
                .encode_ordinary(t)
                .len() as u32;
            let o2 = tiktoken_rs::o200k_base_singleton().encode_ordinary(t).len() as u32;
            assert_eq!(Encoding::Cl100k.count(t), cl, "cl100k: {t:?}");
            assert_eq!(Encoding::O200k.count(t), o2, "o200k: {t:?}");
        }
    }

    #[test]
    fn counts_with_real_encodings() {
        assert_eq!(count(""), 0);
        assert_eq!(Encoding::Cl100k.count("hello world"), 2);
        assert_eq!(Encoding::for_model("gpt-4o-mini"), Encoding::O200k);
        assert_eq!(Encoding::for_model("gpt-4"), Encoding::Cl100k);
        assert_eq!(Encoding::for_model("mistral-small"), Encoding::Cl100k);
    }

    #[test]
    fn budget_split_keeps_message_boundaries() {
        assert_eq!(split_by_budget(&[3, 3, 3], 6), vec![0..2, 2..3]);
        assert_eq!(split_by_budget(&[10, 1, 1], 5), vec![0..1, 1..3]);
        assert_eq!(split_by_budget(&[], 5), Vec::<Range<usize>>::new());
        assert_eq!(split_by_budget(&[5, 5], 10), vec![0..2]);
    }

    #[test]
    fn oversized_text_splits_on_paragraphs() {
        let para = "word ".repeat(50);
        let text = [para.as_str(); 4].join("\n\n");
        let pieces = split_text(&text, 120);
        assert!(pieces.len() >= 2);
        assert!(pieces.iter().all(|p| count(p) <= 120));
        assert_eq!(pieces.join("\n\n"), text);
    }

    #[tokio::test]
    async fn large_batches_count_off_the_reactor() {
        let texts = vec!["a sentence of text. ".repeat(1000); 3];
        let counts = count_many(texts.clone()).await;
        assert_eq!(counts, texts.iter().map(|t| count(t)).collect::<Vec<_>>());
    }

    #[test]
    fn many_short_paragraphs_whose_joins_overflow_are_split_and_end() {
        // Each paragraph fits, but joined with their separators they do not: the split
        // once recursed on the same text forever.
        let text = vec!["ab"; 400].join("\n\n");
        let budget = 50;
        let pieces = split_text(&text, budget);
        assert!(pieces.iter().all(|p| count(p) <= budget));
        assert_eq!(pieces.join("\n\n"), text);
    }
}
