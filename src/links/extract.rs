//! Finds markdown links `[text](http(s)://...)` in answer text, outside fenced code blocks
//! and inline code spans, and rewrites chosen ones.

use std::ops::Range;

/// One markdown link as written in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link<'a> {
    /// The whole `[text](url)`.
    pub span: Range<usize>,
    pub text: &'a str,
    pub url: &'a str,
}

/// The links of `text`. `in_fence` carries the fenced-code state across calls (paragraphs
/// of one answer are scanned in order); start with `false`.
pub fn links<'a>(text: &'a str, in_fence: &mut bool) -> Vec<Link<'a>> {
    let mut out = Vec::new();
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with("```") {
            *in_fence = !*in_fence;
        } else if !*in_fence {
            scan_line(text, line_start, line.len(), &mut out);
        }
        line_start += line.len();
    }
    out
}

/// Links of one line outside inline code spans.
fn scan_line<'a>(text: &'a str, start: usize, len: usize, out: &mut Vec<Link<'a>>) {
    let line = &text.as_bytes()[start..start + len];
    let mut i = 0;
    while i < line.len() {
        match line[i] {
            b'`' => {
                let run = line[i..].iter().take_while(|&&b| b == b'`').count();
                i += run;
                if let Some(close) = find_backtick_run(&line[i..], run) {
                    i += close + run;
                }
            }
            b'[' if i == 0 || line[i - 1] != b'!' => match parse_link(text, start + i, start + len)
            {
                Some(link) => {
                    i = link.span.end - start;
                    out.push(link);
                }
                None => i += 1,
            },
            _ => i += 1,
        }
    }
}

/// Offset of the next run of exactly `run` backticks in `s`.
fn find_backtick_run(s: &[u8], run: usize) -> Option<usize> {
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'`' {
            let n = s[i..].iter().take_while(|&&b| b == b'`').count();
            if n == run {
                return Some(i);
            }
            i += n;
        } else {
            i += 1;
        }
    }
    None
}

/// `[text](http(s)://...)` starting at `at` (a `[`), ending before `end`.
fn parse_link(text: &str, at: usize, end: usize) -> Option<Link<'_>> {
    let bytes = text.as_bytes();
    let close = at + 1 + bytes[at + 1..end].iter().position(|&b| b == b']')?;
    if close == at + 1 || bytes.get(close + 1) != Some(&b'(') {
        return None;
    }
    let url_start = close + 2;
    let head = &bytes[url_start..(url_start + 8).min(end)];
    let is_http = |scheme: &[u8]| {
        head.len() >= scheme.len() && head[..scheme.len()].eq_ignore_ascii_case(scheme)
    };
    if !(is_http(b"http://") || is_http(b"https://")) {
        return None;
    }
    // The URL ends at the `)` that balances the opening one (Wikipedia-style `(x)` inside).
    let mut depth = 0usize;
    let mut url_end = None;
    for (k, &b) in bytes[url_start..end].iter().enumerate() {
        match b {
            b'(' => depth += 1,
            b')' if depth == 0 => {
                url_end = Some(url_start + k);
                break;
            }
            b')' => depth -= 1,
            b'\n' | b'\r' => return None,
            _ => {}
        }
    }
    let url_end = url_end?;
    let mut url = &text[url_start..url_end];
    // `[t](url "title")`: the URL is the part before the title.
    if let Some((first, rest)) = url.split_once(char::is_whitespace) {
        let rest = rest.trim();
        if rest.len() >= 2
            && ((rest.starts_with('"') && rest.ends_with('"'))
                || (rest.starts_with('\'') && rest.ends_with('\'')))
        {
            url = first;
        }
    }
    Some(Link {
        span: at..url_end + 1,
        text: &text[at + 1..close],
        url,
    })
}

/// The search URL for a link text: `{query}` in `template` becomes the form-url-encoded text.
pub fn search_url(template: &str, text: &str) -> String {
    let query: String = url::form_urlencoded::byte_serialize(text.as_bytes()).collect();
    template.replace("{query}", &query)
}

/// `text` with every link whose URL `broken` accepts replaced by `[text](search URL)`;
/// returns the new text and the (text, url) pairs replaced, in order.
pub fn replace_broken(
    text: &str,
    template: &str,
    broken: impl Fn(&str) -> bool,
) -> (String, Vec<(String, String)>) {
    let mut out = String::with_capacity(text.len());
    let mut replaced = Vec::new();
    let mut last = 0;
    for link in links(text, &mut false) {
        if !broken(link.url) {
            continue;
        }
        out.push_str(&text[last..link.span.start]);
        out.push('[');
        out.push_str(link.text);
        out.push_str("](");
        out.push_str(&search_url(template, link.text));
        out.push(')');
        last = link.span.end;
        replaced.push((link.text.to_string(), link.url.to_string()));
    }
    out.push_str(&text[last..]);
    (out, replaced)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(text: &str) -> Vec<(&str, &str)> {
        links(text, &mut false)
            .into_iter()
            .map(|l| (l.text, l.url))
            .collect()
    }

    #[test]
    fn finds_http_and_https_links() {
        assert_eq!(
            urls("See [a](https://a.example/x) and [b c](http://b.example).\n"),
            vec![("a", "https://a.example/x"), ("b c", "http://b.example")]
        );
    }

    #[test]
    fn ignores_other_schemes_images_and_plain_brackets() {
        assert!(
            urls("[m](mailto:x@y) ![img](https://i.example/p.png) [x] (y) [](https://e.x)")
                .is_empty()
        );
        assert!(urls("[a](/relative) [b](ftp://f.example)").is_empty());
    }

    #[test]
    fn skips_fenced_code_and_inline_code() {
        let text = "`[a](https://a.example)` and ``[b](https://b.example)``\n\n```\n[c](https://c.example)\n```\n[d](https://d.example)";
        assert_eq!(urls(text), vec![("d", "https://d.example")]);
    }

    #[test]
    fn fence_state_carries_across_paragraphs() {
        let mut fence = false;
        assert!(links("```rust\n[a](https://a.example)\n", &mut fence).is_empty());
        assert!(fence);
        assert!(links("[b](https://b.example)\n```\n", &mut fence).is_empty());
        assert!(!fence);
        assert_eq!(links("[c](https://c.example)", &mut fence).len(), 1);
    }

    #[test]
    fn balanced_parentheses_and_titles() {
        assert_eq!(
            urls(
                "[w](https://en.wikipedia.org/wiki/Rust_(language)) [t](https://t.example \"Title\")"
            ),
            vec![
                ("w", "https://en.wikipedia.org/wiki/Rust_(language)"),
                ("t", "https://t.example")
            ]
        );
    }

    #[test]
    fn malformed_urls_are_still_links() {
        assert_eq!(
            urls("[bad](http://exa mple.com/x)"),
            vec![("bad", "http://exa mple.com/x")]
        );
        assert!(urls("[open](https://a.example\n)").is_empty());
    }

    #[test]
    fn replaces_only_broken_links_outside_code() {
        let text = "[Python docs](https://gone.example) ok [k](https://ok.example)\n```\n[Python docs](https://gone.example)\n```\nagain [x & y](https://gone.example)";
        let (out, replaced) =
            replace_broken(text, "https://search.brave.com/search?q={query}", |u| {
                u == "https://gone.example"
            });
        assert_eq!(
            out,
            "[Python docs](https://search.brave.com/search?q=Python+docs) ok [k](https://ok.example)\n```\n[Python docs](https://gone.example)\n```\nagain [x & y](https://search.brave.com/search?q=x+%26+y)"
        );
        assert_eq!(replaced.len(), 2);
    }
}
