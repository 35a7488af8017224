// @ts-check
/**
 * The demo page's messages: a message, or an answer as it streams (markdown rendered into
 * DOM nodes, never HTML from the model), its reasoning collapsed above it, how it ended,
 * the cards of its embeds, and the follow-up suggestions.
 */

import { render } from '/demo/markdown.js';
import { $, el, embeds, nodes, page, updateCancel } from '/demo/page.js';

/**
 * Shows a message, or updates it; a new one goes by its time unless `append`.
 * @param {import('/chatd-client.js').ChatMessage} m @param {boolean} [append]
 */
export function upsertMessage(m, append = false) {
  let node = nodes.get(m.message_id);
  if (!node) {
    node = document.createElement('article');
    node.className = 'message';
    node.dataset.testid = 'message';
    node.dataset.messageId = m.message_id;
    node.dataset.at = String(m.at);
    const body = document.createElement('div');
    body.className = 'body';
    const cards = document.createElement('div');
    cards.className = 'embeds';
    node.append(body, cards);
    // Placed by the message's own time; one without (a synced one) goes by order.
    nodes.set(m.message_id, node);
    const list = $('#messages');
    const after = append ? undefined : [...list.children].find((n) => Number(n.dataset.at) > m.at);
    list.insertBefore(node, after ?? null);
  }
  // Opening a chat lays its messages out in the client's order, also those that events
  // showed while it loaded them.
  else if (append) $('#messages').append(node);
  node.dataset.role = m.role;
  node.dataset.state = m.state;
  // A message of this browser the server has not confirmed yet (sent again on reconnect).
  if (m.role === 'user') node.dataset.pending = String(Boolean(m.pending));
  const body = /** @type {HTMLElement} */ (node.querySelector('.body'));
  if (m.thinking) {
    // The model's reasoning: collapsed unless the user opens it (kept open while it grows).
    let details = /** @type {HTMLDetailsElement|null} */ (node.querySelector('.reasoning'));
    if (!details) {
      details = /** @type {HTMLDetailsElement} */ (el('details', { cls: 'reasoning', testid: 'reasoning' }));
      details.append(el('summary'), el('div', { cls: 'thought' }));
      node.insertBefore(details, body);
    }
    /** @type {HTMLElement} */ (details.firstChild).textContent = m.thinking_done || m.state === 'done' ? 'Reasoning' : 'Thinking…';
    /** @type {HTMLElement} */ (details.lastChild).textContent = m.thinking;
  }
  if (m.role === 'user') body.textContent = m.content;
  else if (m.replaces_through) {
    // A compressed message: a marker where it sits, the summary behind it.
    const marker = el('details', { cls: 'summarised', testid: 'summarised' });
    marker.append(el('summary', { text: 'Earlier messages summarised' }), render(m.content));
    body.replaceChildren(marker);
  } else body.replaceChildren(render(m.content, { code: embedReference }));
  node.querySelectorAll('.note, .meta, .ending').forEach((n) => n.remove());
  if (m.links_repaired) {
    const note = document.createElement('div');
    note.className = 'note';
    note.dataset.testid = 'links-repaired';
    note.textContent = 'Some links in this answer were broken; they now point to a search for their text.';
    node.append(note);
  }
  if (m.pending) {
    const meta = document.createElement('div');
    meta.className = 'meta';
    meta.textContent = 'Sending…';
    node.append(meta);
  }
  if (m.state === 'done' && m.interrupted) node.append(el('div', { cls: 'meta', text: 'Stopped.' }));
  else if (m.state === 'done' && (m.interrupted_by_shutdown || m.error_code)) {
    // Not the user's doing: said for what it is.
    const text = m.interrupted_by_shutdown ? 'Interrupted: the server restarted before this answer was complete.'
      : m.error_code === 'node_lost' ? 'Interrupted: the server running this answer stopped. Ask again to continue.'
        : `Ended early (${m.error_code}).`;
    node.append(el('div', { cls: 'ending', text, testid: 'notice' }));
  }
  for (const e of embeds.values()) if (e.message_id === m.message_id) placeEmbed(e);
  if (m.state === 'done') updateCancel();
  messagesBox().scrollTop = messagesBox().scrollHeight;
}

const messagesBox = () => $("#messages");

/** A fenced embed reference (`{"type": "app_skill_use", "embed_id": ...}`) shows as its card below the text. @param {string} lang @param {string} code */
function embedReference(lang, code) {
  if (lang && lang !== 'json') return null;
  try {
    const ref = JSON.parse(code);
    return ref && typeof ref.embed_id === 'string' && typeof ref.type === 'string' ? document.createComment('embed') : null;
  } catch {
    return null;
  }
}

/** @param {import('/chatd-client.js').EmbedView} e */
export function placeEmbed(e) {
  if (e.parent_embed_id) {
    // A result of a composite skill: counted in its parent's card.
    const parent = embeds.get(e.parent_embed_id);
    if (parent) placeEmbed(parent);
    return;
  }
  const owner = e.message_id && nodes.get(e.message_id);
  if (!owner) return;
  let card = /** @type {HTMLElement|null} */ (owner.querySelector(`[data-embed-id="${CSS.escape(e.embed_id)}"]`));
  if (!card) {
    card = document.createElement('div');
    card.className = 'embed';
    card.dataset.testid = 'embed';
    card.dataset.embedId = e.embed_id;
    /** @type {HTMLElement} */ (owner.querySelector('.embeds')).append(card);
  }
  card.dataset.status = e.status;
  const head = document.createElement('header');
  const name = document.createElement('span');
  name.textContent = [e.app_id, e.skill_id].filter(Boolean).join(' · ') || (e.type === 'app_skill_use' ? 'Skill' : e.type) || 'Result';
  const status = document.createElement('span');
  status.className = 'status';
  status.textContent = e.status;
  head.append(name, status);
  const running = e.status === 'processing' || e.status === 'waiting';
  if (running && e.skill_task_id) {
    const stop = document.createElement('button');
    stop.type = 'button';
    stop.dataset.testid = 'stop-skill';
    stop.textContent = 'Stop';
    const skill = e.skill_task_id;
    stop.addEventListener('click', () => page.client?.cancelSkill(skill, e.embed_id));
    head.append(stop);
  }
  const children = [...embeds.values()].filter((c) => c.parent_embed_id === e.embed_id).length;
  const preview = document.createElement('pre');
  preview.textContent = children ? `${children} result(s)` : (e.content ?? '').split('\n').slice(0, 6).join('\n');
  card.replaceChildren(head, preview);
  if (e.injection_flagged) {
    const warn = document.createElement('div');
    warn.className = 'note';
    warn.textContent = 'This result looked like a prompt injection; review it before trusting it.';
    card.append(warn);
  }
}

/** @param {string[]} items @param {(text: string) => void} pick what a click on one does */
export function renderSuggestions(items, pick) {
  $('#suggestions').replaceChildren(...items.map((text) => {
    const b = document.createElement('button');
    b.type = 'button';
    b.dataset.testid = 'suggestion';
    b.textContent = text;
    b.addEventListener('click', () => pick(text));
    return b;
  }));
}
