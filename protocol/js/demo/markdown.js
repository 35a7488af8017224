// @ts-check
/**
 * A small markdown subset rendered as DOM nodes: nothing the model writes becomes HTML.
 * Every piece of text goes in with `textContent`; links keep only `http(s):` and `mailto:`
 * targets and open in a new tab without a referrer. Supported: paragraphs, `#`-`######`
 * headings, fenced code blocks, `-`/`*`/`1.` lists, `>` quotes, `---`, `**bold**`,
 * `*italic*`/`_italic_`, `` `code` ``, `[text](url)` and bare URLs.
 */

/**
 * @typedef {(lang: string, code: string) => Node|null} CodeHook
 * Called for each fenced block; a node it returns replaces the block (embed references).
 */

/**
 * Renders `text` into a fragment.
 * @param {string} text
 * @param {{code?: CodeHook}} [hooks]
 * @returns {DocumentFragment}
 */
export function render(text, hooks = {}) {
  const out = document.createDocumentFragment();
  const lines = text.replace(/\r\n?/g, '\n').split('\n');
  let i = 0;
  /** @type {string[]} */
  let para = [];
  const flush = () => {
    if (para.length) out.append(el('p', inline(para.join('\n'))));
    para = [];
  };
  while (i < lines.length) {
    const line = lines[i];
    const fence = /^\s*(```+|~~~+)\s*([\w+-]*)\s*$/.exec(line);
    if (fence) {
      flush();
      const close = fence[1];
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(close)) body.push(lines[i++]);
      i++;
      const code = body.join('\n');
      const hooked = hooks.code?.(fence[2], code);
      if (hooked) {
        out.append(hooked);
      } else {
        const pre = el('pre');
        const c = el('code');
        c.textContent = code;
        if (fence[2]) c.dataset.lang = fence[2];
        pre.append(c);
        out.append(pre);
      }
      continue;
    }
    const heading = /^(#{1,6})\s+(.*)$/.exec(line);
    if (heading) {
      flush();
      out.append(el(`h${heading[1].length}`, inline(heading[2])));
      i++;
      continue;
    }
    if (/^\s*(-{3,}|\*{3,}|_{3,})\s*$/.test(line)) {
      flush();
      out.append(el('hr'));
      i++;
      continue;
    }
    if (/^\s*>/.test(line)) {
      flush();
      const quoted = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s*>\s?/, ''));
      const q = el('blockquote');
      q.append(render(quoted.join('\n'), hooks));
      out.append(q);
      continue;
    }
    const item = /^\s*([-*+]|\d+[.)])\s+(.*)$/.exec(line);
    if (item) {
      flush();
      const ordered = /\d/.test(item[1]);
      const list = el(ordered ? 'ol' : 'ul');
      while (i < lines.length) {
        const m = /^\s*([-*+]|\d+[.)])\s+(.*)$/.exec(lines[i]);
        if (!m || /\d/.test(m[1]) !== ordered) break;
        list.append(el('li', inline(m[2])));
        i++;
      }
      out.append(list);
      continue;
    }
    if (!line.trim()) {
      flush();
      i++;
      continue;
    }
    para.push(line);
    i++;
  }
  flush();
  return out;
}

/**
 * @param {string} tag
 * @param {Node|string} [child]
 * @returns {HTMLElement}
 */
function el(tag, child) {
  const e = document.createElement(tag);
  if (child !== undefined) e.append(child);
  return e;
}

/** @param {string} href */
function safeUrl(href) {
  try {
    const u = new URL(href);
    return ['http:', 'https:', 'mailto:'].includes(u.protocol) ? u.href : null;
  } catch {
    return null;
  }
}

const INLINE = /`([^`\n]+)`|\*\*([^*\n]+)\*\*|__([^_\n]+)__|\*([^*\n]+)\*|\b_([^_\n]+)_\b|\[([^\]\n]+)\]\(([^)\s]+)\)|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])/g;

/**
 * Inline markup of one block as a fragment.
 * @param {string} text
 * @returns {DocumentFragment}
 */
export function inline(text) {
  const out = document.createDocumentFragment();
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    const at = m.index ?? 0;
    if (at > last) out.append(withBreaks(text.slice(last, at)));
    last = at + m[0].length;
    if (m[1] !== undefined) {
      const c = el('code');
      c.textContent = m[1];
      out.append(c);
    } else if (m[2] !== undefined || m[3] !== undefined) {
      out.append(el('strong', inline(m[2] ?? m[3])));
    } else if (m[4] !== undefined || m[5] !== undefined) {
      out.append(el('em', inline(m[4] ?? m[5])));
    } else {
      const label = m[6] ?? m[8];
      const href = safeUrl(m[7] ?? m[8]);
      if (!href) {
        out.append(document.createTextNode(m[0]));
        continue;
      }
      const a = /** @type {HTMLAnchorElement} */ (el('a'));
      a.href = href;
      a.target = '_blank';
      a.rel = 'noopener noreferrer nofollow';
      a.append(m[6] !== undefined ? inline(label) : document.createTextNode(label));
      out.append(a);
    }
  }
  if (last < text.length) out.append(withBreaks(text.slice(last)));
  return out;
}

/** Text with its line breaks as `<br>`. @param {string} text */
function withBreaks(text) {
  const f = document.createDocumentFragment();
  text.split('\n').forEach((part, n) => {
    if (n) f.append(el('br'));
    f.append(document.createTextNode(part));
  });
  return f;
}
