// @ts-check
/**
 * The demo page: sign-in (the ways in are sign-in.js; the passphrase derives the master key
 * here and goes nowhere), the chat list, a chat's messages with answers streaming as markdown rendered
 * into DOM nodes (never HTML from the model), the model's reasoning collapsed above its
 * answer, embeds as cards with a stop button while their skill runs, follow-up suggestions,
 * a cancel button while answering, routines (progress, their questions answered inline,
 * cancel), focus modes, settings/memories requests, proposals and suggestions. Everything
 * talks to chatd through /chatd-client.js.
 */

import { ChatdClient, forgetUser, rememberedMasterKey } from '/chatd-client.js';
import { render } from '/demo/markdown.js';
import { SESSION, fresh, showSignIn } from '/demo/sign-in.js';

/** @param {string} sel @returns {any} */
const $ = (sel) => document.querySelector(sel);
const CHAT = 'chatd-demo-chat';
const FOCUS = 'chatd-demo-focus-modes';
const wsUrl = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/v1/ws`;

/** @type {ChatdClient|null} */
let client = null;
/** @type {string|null} */
let current = null;
/** @type {Map<string, HTMLElement>} message id -> element */
const nodes = new Map();
/** @type {Map<string, import('/chatd-client.js').EmbedView>} */
const embeds = new Map();
/** @type {Map<string, import('/chatd-client.js').RoutineView>} run id -> run */
const routines = new Map();
/** Open settings requests, proposals and suggested entries, by id (each names its chat). @type {Map<string, {kind: string, chat_id: string, data: any}>} */
const panels = new Map();
/** @type {Map<string, HTMLElement>} */
const panelNodes = new Map();

/** A new element with a class, text and a test id. @param {string} tag @param {{cls?: string, text?: string, testid?: string}} [o] */
function el(tag, o = {}) {
  const n = document.createElement(tag);
  if (o.cls) n.className = o.cls;
  if (o.text !== undefined) n.textContent = o.text;
  if (o.testid) n.dataset.testid = o.testid;
  return n;
}

/** A button. @param {string} text @param {() => void} onClick @param {string} [testid] */
function button(text, onClick, testid) {
  const b = /** @type {HTMLButtonElement} */ (el('button', { text, testid }));
  b.type = 'button';
  b.addEventListener('click', onClick);
  return b;
}

async function start() {
  $('#sign-out').addEventListener('click', signOut);
  $('[data-testid=new-chat]').addEventListener('click', () => newChat());
  $('#composer').addEventListener('submit', (/** @type {Event} */ e) => {
    e.preventDefault();
    send($('[data-testid=chat-input]').value);
  });
  $('[data-testid=chat-input]').addEventListener('keydown', (/** @type {KeyboardEvent} */ e) => {
    if (e.key === 'Enter' && !e.shiftKey) {
      e.preventDefault();
      send($('[data-testid=chat-input]').value);
    }
  });
  $('[data-testid=cancel]').addEventListener('click', () => current && client?.cancel(current));
  $('#menu').addEventListener('click', () => $('#app').classList.toggle('menu'));
  $('#focus-toggle').addEventListener('click', toggleFocus);
  const saved = JSON.parse(sessionStorage.getItem(SESSION) ?? 'null');
  const key = saved && (await rememberedMasterKey(saved.user));
  await showSignIn(saved && key ? { who: saved, key } : null, enter);
}

async function signOut() {
  const saved = JSON.parse(sessionStorage.getItem(SESSION) ?? 'null');
  client?.close();
  sessionStorage.clear();
  if (saved) await forgetUser(saved.user);
  location.reload();
}

/** @param {import("/demo/sign-in.js").Session} who @param {CryptoKey} key */
async function enter(who, key) {
  const { user, token } = who;
  $('#login').hidden = true;
  $('#app').hidden = false;
  $('#whoami').textContent = `Signed in as ${user}`;
  // An expired token is replaced without asking when the way in allows (see `fresh`).
  client = await ChatdClient.open({ url: wsUrl, token, userId: user, masterKey: key, refreshToken: () => fresh(who) });
  const on = (/** @type {string} */ type, /** @type {(d: any) => void} */ f) =>
    client?.addEventListener(type, (e) => f(/** @type {CustomEvent} */ (e).detail));
  on('connection', (d) => {
    const c = $('#connection');
    c.dataset.state = d.state;
    c.textContent = d.state === 'open' ? 'connected' : d.state;
    // How many times the socket opened (tests wait for a reconnection with it).
    if (d.state === 'open') c.dataset.opened = String(Number(c.dataset.opened ?? 0) + 1);
    if (d.state === 'restarting') notice(d.message || 'The server is restarting; reconnecting…');
  });
  on('chats', (d) => renderChats(d.chats));
  on('chat_key', async (d) => {
    if (d.chat_id !== current || !client) return;
    // Its messages and embeds arrived before the key (a sync): shown now.
    for (const e of await client.chatEmbeds(d.chat_id)) embeds.set(e.embed_id, e);
    for (const m of await client.messages(d.chat_id)) upsertMessage(m, true);
  });
  on('message', (d) => d.message.chat_id === current && upsertMessage(d.message));
  on('embed', (d) => {
    embeds.set(d.embed.embed_id, d.embed);
    if (d.embed.chat_id === current) placeEmbed(d.embed);
  });
  on('suggestions', (d) => {
    for (const s of d.settings_memories ?? []) panels.set(s.hash, { kind: 'suggestion', chat_id: d.chat_id, data: s });
    if (d.chat_id === current) renderSuggestions(d.follow_ups);
    renderPanels();
  });
  on('task', (d) => {
    updateCancel();
    if (d.state === 'queued' && d.chat_id === current) notice(d.message || 'Queued: answered after the running answer.');
  });
  on('routine', (d) => {
    routines.set(d.routine.run_id, d.routine);
    renderRoutines();
  });
  on('focus', (d) => {
    if (d.active && d.focus_id) remember(d.focus_id);
    if (d.chat_id === current) renderFocus();
  });
  on('settings_request', (d) => {
    panels.set(d.request.request_id, { kind: 'request', chat_id: d.request.chat_id, data: d.request });
    renderPanels();
  });
  on('settings_dismissed', (d) => {
    panels.delete(d.request_id);
    renderPanels();
  });
  on('proposal', (d) => {
    panels.set(d.proposal.proposal_id, { kind: 'proposal', chat_id: d.proposal.chat_id, data: d.proposal });
    renderPanels();
  });
  on('suggestion_rejected', (d) => {
    panels.delete(d.hash);
    renderPanels();
  });
  on('error', (d) => notice(`${d.code}: ${d.message}`));
  for (const f of JSON.parse(localStorage.getItem(FOCUS) ?? '[]')) remember(f);
  // The focus modes this server's apps offer, to pick from.
  fetch('/v1/focus-modes').then((r) => (r.ok ? r.json() : { focus_modes: [] }))
    .then((d) => d.focus_modes.forEach((/** @type {{id: string}} */ m) => remember(m.id)), () => {});
  on('history_resent', (d) => console.info(`re-sent ${d.messages} messages of ${d.chat_id} from this browser`));
  renderChats(await client.listChats());
  const last = sessionStorage.getItem(CHAT);
  const chats = await client.listChats();
  if (last && chats.some((c) => c.chat_id === last)) await openChat(last);
  else if (chats.length) await openChat(chats[0].chat_id);
}

/** @param {import('/chatd-client.js').ChatSummary[]} chats */
function renderChats(chats) {
  const list = $('#chat-list');
  list.replaceChildren(...chats.map((c) => {
    const li = document.createElement('li');
    li.dataset.testid = 'chat-list-item';
    li.dataset.chatId = c.chat_id;
    li.textContent = c.title;
    li.title = c.title;
    if (c.running) li.classList.add('running');
    li.setAttribute('aria-current', String(c.chat_id === current));
    li.addEventListener('click', () => {
      $('#app').classList.remove('menu');
      openChat(c.chat_id);
    });
    return li;
  }));
  const shown = chats.find((c) => c.chat_id === current);
  if (shown) $('#chat-title').textContent = shown.title;
  updateCancel();
}

async function newChat() {
  if (!client) return;
  $('#app').classList.remove('menu');
  await openChat(await client.newChat());
  $('[data-testid=chat-input]').focus();
}

/** @param {string} chatId */
async function openChat(chatId) {
  if (!client) return;
  current = chatId;
  sessionStorage.setItem(CHAT, chatId);
  client.setActiveChat(chatId);
  nodes.clear();
  $('#messages').replaceChildren();
  $('#suggestions').replaceChildren();
  $('#notices').replaceChildren();
  for (const e of await client.chatEmbeds(chatId)) embeds.set(e.embed_id, e);
  // In the client's order (each answer after its question), whatever the clocks say.
  for (const m of await client.messages(chatId)) upsertMessage(m, true);
  renderChats(await client.listChats());
  renderFocus();
  renderRoutines();
  renderPanels();
}

/** @param {string} text */
async function send(text) {
  if (!client || !text.trim()) return;
  if (!current) await openChat(await client.newChat());
  $('[data-testid=chat-input]').value = '';
  $('#suggestions').replaceChildren();
  await client.sendMessage(/** @type {string} */ (current), text.trim());
}

/**
 * Shows a message, or updates it; a new one goes by its time unless `append`.
 * @param {import('/chatd-client.js').ChatMessage} m @param {boolean} [append]
 */
function upsertMessage(m, append = false) {
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
function placeEmbed(e) {
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
    stop.addEventListener('click', () => client?.cancelSkill(skill, e.embed_id));
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

/** @param {string[]} items */
function renderSuggestions(items) {
  $('#suggestions').replaceChildren(...items.map((text) => {
    const b = document.createElement('button');
    b.type = 'button';
    b.dataset.testid = 'suggestion';
    b.textContent = text;
    b.addEventListener('click', () => send(text));
    return b;
  }));
}

function updateCancel() {
  $('[data-testid=cancel]').hidden = !(current && client?.running.has(current));
}

/** @param {string} text */
function notice(text) {
  $('#notices').replaceChildren(el('div', { text, testid: 'notice' }));
}

/** A focus mode seen once is offered again in the focus field. @param {string} id */
function remember(id) {
  const known = $('#focus-known');
  if ([...known.children].some((o) => o.value === id)) return;
  const o = document.createElement('option');
  o.value = id;
  known.append(o);
  localStorage.setItem(FOCUS, JSON.stringify([...known.children].map((o) => o.value)));
}

function renderFocus() {
  const active = current && client?.focusOf(current);
  const shown = $('[data-testid=focus-indicator]');
  shown.hidden = !active;
  shown.textContent = active ? `Focus: ${active}` : '';
  $('#focus-id').hidden = Boolean(active);
  $('#focus-toggle').textContent = active ? 'End focus' : 'Focus';
  $('#focus-toggle').dataset.active = String(Boolean(active));
}

async function toggleFocus() {
  if (!client) return;
  if (!current) await openChat(await client.newChat());
  const chat = /** @type {string} */ (current);
  if (client.focusOf(chat)) return client.deactivateFocusMode(chat);
  const id = $('#focus-id').value.trim();
  if (!id) return $('#focus-id').focus();
  client.activateFocusMode(chat, id);
}

/** The current chat's routine runs: progress, the question answered inline, cancel. */
function renderRoutines() {
  $('#routines').replaceChildren(...[...routines.values()].filter((r) => r.chat_id === current).map((r) => {
    const card = el('div', { cls: 'panel routine', testid: 'routine-progress' });
    card.dataset.runId = r.run_id;
    card.dataset.state = r.state;
    const head = el('header');
    const status = r.state === 'finished' ? `finished (${r.outcome})` : r.status ?? (r.state === 'waiting' ? 'waiting for you' : 'running');
    head.append(el('b', { text: r.routine || 'Routine' }), el('span', { cls: 'status', text: status }));
    if (r.state !== 'finished') head.append(button('Cancel', () => client?.cancelRoutine(r.run_id), 'routine-cancel'));
    card.append(head, ...r.information.map((t) => el('div', { cls: 'meta', text: t })), ...r.errors.map((t) => el('div', { cls: 'note', text: t })));
    if (r.state === 'waiting' && r.question) {
      const form = el('form', { cls: 'ask' });
      const input = /** @type {HTMLInputElement} */ (el('input', { testid: 'routine-answer' }));
      input.setAttribute('aria-label', r.question);
      form.append(el('label', { text: r.question, testid: 'routine-question' }), input, el('button', { text: 'Answer' }));
      form.addEventListener('submit', (e) => {
        e.preventDefault();
        if (client && input.value.trim()) {
          answerRoutine(input.value.trim());
          input.value = '';
        }
      });
      card.append(form);
    }
    return card;
  }));
}

/** A routine's answer is the user's next message in the chat. @param {string} text */
function answerRoutine(text) {
  if (client && current) client.answerRoutine(current, text);
}

/** The current chat's settings/memories requests, proposals and suggested entries. */
function renderPanels() {
  for (const id of panelNodes.keys()) if (!panels.has(id)) panelNodes.delete(id);
  $('#dialogs').replaceChildren(...[...panels.entries()].filter(([, p]) => p.chat_id === current).map(([id, p]) => {
    // Kept while shown, so what the user typed stays.
    const made = panelNodes.get(id) ?? panelNode(id, p);
    panelNodes.set(id, made);
    return made;
  }));
}

/** @param {string} id @param {{kind: string, chat_id: string, data: any}} p @returns {HTMLElement} */
function panelNode(id, p) {
  {
    if (p.kind === 'request') return settingsDialog(p.data);
    const box = el('div', { cls: 'panel', testid: p.kind === 'proposal' ? 'memory-proposal' : 'memory-suggestion' });
    const drop = () => { panels.delete(id); renderPanels(); };
    if (p.kind === 'proposal') {
      const d = p.data;
      box.append(el('div', { text: `The assistant proposes to ${d.action} in ${d.app_id} · ${d.category}:` }), el('pre', { text: JSON.stringify(d.entry, null, 1) }),
        button('Accept', () => { client?.answerProposal(d.proposal_id, true); drop(); }, 'proposal-accept'),
        button('Decline', () => { client?.answerProposal(d.proposal_id, false); drop(); }, 'proposal-decline'));
    } else {
      const s = p.data;
      box.dataset.hash = s.hash;
      box.append(el('div', { text: `Remember “${s.suggested_title}” (${s.app_id} · ${s.item_type})?` }), el('pre', { text: JSON.stringify(s.item_value, null, 1) }),
        button('Never suggest this', () => client?.rejectSuggestion(p.chat_id, s), 'memory-reject'), button('Dismiss', drop));
    }
    return box;
  }
}

/**
 * A `request_app_settings_memories` dialog: per category a form from its JSON Schema when
 * the request carries one (`schemas`), else a JSON text area; empty means "not this one".
 * @param {any} r
 */
function settingsDialog(r) {
  const form = el('form', { cls: 'panel', testid: 'settings-dialog' });
  form.dataset.requestId = r.request_id;
  const error = el('div', { cls: 'note' });
  form.append(el('div', { text: 'The assistant asks for your saved settings and memories (shared with this chat only):' }));
  /** @type {(() => any)[]} */
  const readers = r.requested_keys.map((/** @type {string} */ key) => {
    const [app, category] = key.split(/[:-]/, 2);
    const field = el('fieldset');
    field.append(el('legend', { text: `${app} · ${category}` }));
    form.append(field);
    const schema = r.schemas?.[key];
    const read = schema?.properties ? schemaFields(field, schema) : jsonField(field, key);
    return () => {
      const v = read();
      return (Array.isArray(v) ? v : v == null ? [] : [v]).map((content) => ({ app_id: app, item_key: category, content }));
    };
  });
  form.append(button('Share', () => {
    try {
      client?.confirmSettings(r.chat_id, r.request_id, readers.flatMap((read) => read()));
    } catch (e) {
      error.textContent = String(/** @type {Error} */ (e).message);
    }
  }, 'settings-confirm'), button('Decline', () => client?.declineSettings(r.chat_id, r.request_id), 'settings-decline'), error);
  return form;
}

/** @param {HTMLElement} field @param {string} key @returns {() => any} */
function jsonField(field, key) {
  const area = /** @type {HTMLTextAreaElement} */ (el('textarea'));
  area.dataset.key = key;
  area.rows = 3;
  area.placeholder = 'One entry as JSON, e.g. {"name": "value"} (empty: none)';
  field.append(area);
  return () => (area.value.trim() ? JSON.parse(area.value) : null);
}

/** Inputs for an object schema's properties. @param {HTMLElement} field @param {any} schema @returns {() => any} */
function schemaFields(field, schema) {
  const inputs = Object.entries(schema.properties).filter(([name]) => name !== 'id').map(([name, /** @type {any} */ p]) => {
    const input = /** @type {HTMLInputElement|HTMLSelectElement} */ (el(p.enum ? 'select' : 'input'));
    if (p.enum) /** @type {HTMLSelectElement} */ (input).append(...['', ...p.enum].map((v) => Object.assign(el('option', { text: v }), { value: v })));
    else if (p.type === 'integer' || p.type === 'number') /** @type {HTMLInputElement} */ (input).type = 'number';
    input.name = name;
    const label = el('label', { text: name });
    label.append(input);
    field.append(label);
    return input;
  });
  return () => {
    /** @type {any} */
    const out = {};
    for (const i of inputs) if (i.value !== '') out[i.name] = /** @type {HTMLInputElement} */ (i).type === 'number' ? Number(i.value) : i.value;
    return Object.keys(out).length ? out : null;
  };
}

start();
