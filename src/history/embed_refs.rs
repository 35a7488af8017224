//! Embed reference blocks in cached messages: a fenced JSON block
//! ```` ```json {"type": ..., "embed_id": ...} ``` ```` (also ```` ```json_embed ````).
//! Messages are cached with these intact; when history is built for the model each one is
//! replaced by the embed's content as a ```` ```toon ```` block, or a short marker when the
//! embed is not available.

use std::ops::Range;

use serde_json::Value;

use crate::cache::ai::CachedEmbed;

/// One reference block found in a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedRef {
    /// Byte range of the whole block, fences included.
    pub range: Range<usize>,
    pub embed_type: String,
    pub embed_id: String,
}

/// Fields that describe the embed for the client, not its content.
const CLIENT_ONLY_FIELDS: &[&str] = &[
    "embed_id",
    "embed_ids",
    "parent_embed_id",
    "status",
    "hashed_chat_id",
    "hashed_message_id",
    "hashed_user_id",
    "version_number",
];

/// Every reference block in `content`, in order.
pub fn find(content: &str) -> Vec<EmbedRef> {
    let mut refs = Vec::new();
    let mut offset = 0;
    let mut open: Option<(usize, usize)> = None; // (block start, body start)
    for line in content.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let trimmed = line.trim();
        match open {
            None => {
                if trimmed == "```json" || trimmed == "```json_embed" {
                    open = Some((start, offset));
                }
            }
            Some((block_start, body_start)) => {
                if trimmed == "```" {
                    open = None;
                    if let Some((embed_type, embed_id)) = parse_ref(&content[body_start..start]) {
                        refs.push(EmbedRef {
                            range: block_start..offset,
                            embed_type,
                            embed_id,
                        });
                    }
                }
            }
        }
    }
    refs
}

fn parse_ref(body: &str) -> Option<(String, String)> {
    let value: Value = serde_json::from_str(body.trim()).ok()?;
    let embed_type = value.get("type")?.as_str()?.to_string();
    let embed_id = value.get("embed_id")?.as_str()?.to_string();
    Some((embed_type, embed_id))
}

/// The embed as the model reads it: its TOON content without client-only fields.
pub fn render(embed: &CachedEmbed) -> String {
    let content = match toon_format::decode_default::<Value>(&embed.content) {
        Ok(Value::Object(mut map)) => {
            for field in CLIENT_ONLY_FIELDS {
                map.remove(*field);
            }
            toon_format::encode_default(&Value::Object(map))
                .unwrap_or_else(|_| embed.content.clone())
        }
        _ => embed.content.clone(),
    };
    format!(
        "```toon\n# embed: {}\n{}\n```\n",
        embed.embed_type,
        content.trim_end()
    )
}

/// The marker for an embed the server cannot provide.
pub fn missing(r: &EmbedRef) -> String {
    format!("[{} embed unavailable]\n", r.embed_type)
}

/// `content` with each reference replaced by `replacement(ref)`.
pub fn substitute(
    content: &str,
    refs: &[EmbedRef],
    replacement: impl Fn(&EmbedRef) -> String,
) -> String {
    let mut out = String::with_capacity(content.len());
    let mut last = 0;
    for r in refs {
        out.push_str(&content[last..r.range.start]);
        out.push_str(&replacement(r));
        last = r.range.end;
    }
    out.push_str(&content[last..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSG: &str = "Look at this:\n```json\n{\"type\": \"web_page\", \"embed_id\": \"e1\"}\n```\nand code:\n```json\n{\"not\": \"a ref\"}\n```\nend";

    #[test]
    fn finds_refs_and_ignores_other_json_blocks() {
        let refs = find(MSG);
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].embed_id, "e1");
        assert_eq!(refs[0].embed_type, "web_page");
        assert!(MSG[refs[0].range.clone()].starts_with("```json\n"));
        assert!(MSG[refs[0].range.clone()].ends_with("```\n"));
    }

    #[test]
    fn renders_toon_without_client_fields_and_marks_missing() {
        let embed = CachedEmbed {
            embed_type: "web_page".into(),
            content: "embed_id: e1\ntitle: Rust\nurl: https://www.rust-lang.org".into(),
            status: None,
            version_number: 1,
        };
        let refs = find(MSG);
        let out = substitute(MSG, &refs, |_| render(&embed));
        assert!(out.contains("```toon\n# embed: web_page\n"));
        assert!(out.contains("title: Rust"));
        assert!(!out.contains("embed_id"));
        assert!(out.contains("{\"not\": \"a ref\"}"));
        let marked = substitute(MSG, &refs, missing);
        assert!(marked.contains("[web_page embed unavailable]"));
        assert!(marked.starts_with("Look at this:\n[web_page"));
    }
}
