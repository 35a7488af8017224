// @ts-check
/**
 * The demo page: development sign-in (the passphrase derives the master key here and goes
 * nowhere), the chat list, a chat's messages with answers streaming as markdown rendered
 * into DOM nodes (never HTML from the model), embeds as cards with a stop button while
 * their skill runs, follow-up suggestions, a cancel button while answering. Everything
 * talks to chatd through /chatd-client.js.
 */

import { ChatdClient, deriveMasterKey, forgetUser, rememberMasterKey, rememberedMasterKey } from '/chatd-client.js';
import { render } from '/demo/markdown.js';

/** @param {string} sel @returns {any} */
const $ = (sel) => document.querySelector(sel);
const SESSION = 'chatd-demo-session';
const CHAT = 'chatd-demo-chat';
const wsUrl = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/v1/ws`;

/** @type {ChatdClient|null} */
let client = null;
/** @type {string|null} */
let current = null;
/** @type {Map<string, HTMLElement>} message id -> element */
const nodes = new Map();
/** @type {Map<string, import('/chatd-client.js').EmbedView>} */
const embeds = new Map();

async function start() {
  $('#login-form').addEventListener('submit', signIn);
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
  const saved = JSON.parse(sessionStorage.getItem(SESSION) ?? 'null');
  const key = saved && (await rememberedMasterKey(saved.user));
  if (saved && key) return enter(saved.user, saved.token, key);
  $('#login').hidden = false;
}

/** @param {Event} e */
async function signIn(e) {
  e.preventDefault();
  const user = $('[data-testid=login-user]').value.trim();
  const passphrase = $('[data-testid=login-passphrase]').value;
  const status = $('#login-status');
  status.textContent = 'Signing in…';
  const res = await mint(user);
  if (!res.ok) {
    status.textContent = res.status === 404
      ? 'This server has no development sign-in ([web] dev_login).'
      : `Sign-in refused: ${await res.text()}`;
    return;
  }
  const { token } = await res.json();
  status.textContent = 'Deriving your key…';
  const key = await deriveMasterKey(user, passphrase);
  $('[data-testid=login-passphrase]').value = '';
  await rememberMasterKey(user, key);
  sessionStorage.setItem(SESSION, JSON.stringify({ user, token }));
  status.textContent = '';
  await enter(user, token, key);
}

/** A development token for `user`: only the user name leaves the page; the token comes back in the body. @param {string} user */
function mint(user) {
  return fetch('/v1/dev/token', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ user }),
  });
}

async function signOut() {
  const saved = JSON.parse(sessionStorage.getItem(SESSION) ?? 'null');
  client?.close();
  sessionStorage.clear();
  if (saved) await forgetUser(saved.user);
  location.reload();
}

/** @param {string} user @param {string} token @param {CryptoKey} key */
async function enter(user, token, key) {
  $('#login').hidden = true;
  $('#app').hidden = false;
  $('#whoami').textContent = `Signed in as ${user}`;
  // An expired token is replaced by a new development sign-in (without one: sign in again).
  const refreshToken = async () => {
    const res = await mint(user);
    if (!res.ok) throw new Error(`sign-in refused: ${res.status}`);
    const fresh = (await res.json()).token;
    sessionStorage.setItem(SESSION, JSON.stringify({ user, token: fresh }));
    return fresh;
  };
  client = await ChatdClient.open({ url: wsUrl, token, userId: user, masterKey: key, refreshToken });
  const on = (/** @type {string} */ type, /** @type {(d: any) => void} */ f) =>
    client?.addEventListener(type, (e) => f(/** @type {CustomEvent} */ (e).detail));
  on('connection', (d) => {
    const c = $('#connection');
    c.dataset.state = d.state;
    c.textContent = d.state === 'open' ? 'connected' : d.state;
    // How many times the socket opened (tests wait for a reconnection with it).
    if (d.state === 'open') c.dataset.opened = String(Number(c.dataset.opened ?? 0) + 1);
  });
  on('chats', (d) => renderChats(d.chats));
  on('chat_key', async (d) => {
    if (d.chat_id !== current || !client) return;
    for (const m of await client.messages(d.chat_id)) upsertMessage(m, true);
  });
  on('message', (d) => d.message.chat_id === current && upsertMessage(d.message));
  on('embed', (d) => {
    embeds.set(d.embed.embed_id, d.embed);
    if (d.embed.chat_id === current) placeEmbed(d.embed);
  });
  on('suggestions', (d) => d.chat_id === current && renderSuggestions(d.follow_ups));
  on('task', () => updateCancel());
  on('error', (d) => notice(`${d.code}: ${d.message}`));
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
    li.addEventListener('click', () => openChat(c.chat_id));
    return li;
  }));
  const shown = chats.find((c) => c.chat_id === current);
  if (shown) $('#chat-title').textContent = shown.title;
  updateCancel();
}

async function newChat() {
  if (!client) return;
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
  if (m.role === 'user') body.textContent = m.content;
  else body.replaceChildren(render(m.content, { code: embedReference }));
  node.querySelectorAll('.note, .meta').forEach((n) => n.remove());
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
  if (m.state === 'done' && (m.interrupted || m.error_code)) {
    const meta = document.createElement('div');
    meta.className = 'meta';
    meta.textContent = m.interrupted ? 'Stopped.' : `Ended early (${m.error_code}).`;
    node.append(meta);
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
  name.textContent = [e.app_id, e.skill_id].filter(Boolean).join(' · ') || e.type || 'embed';
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
  const p = document.createElement('div');
  p.textContent = text;
  $('#notices').replaceChildren(p);
}

start();
