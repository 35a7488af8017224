// @ts-check
/**
 * The demo page: sign-in (the ways in are sign-in.js; the passphrase derives the master key
 * here and goes nowhere), the chat list, a chat's messages with answers streaming as markdown rendered
 * into DOM nodes (never HTML from the model), the model's reasoning collapsed above its
 * answer, embeds as cards with a stop button while their skill runs, follow-up suggestions,
 * a cancel button while answering, routines (progress, their questions answered inline,
 * cancel), focus modes, settings/memories requests, proposals and suggestions. Everything
 * talks to chatd through /chatd-client.js. This module is the page's entry: sign-in, the
 * client's events, the chat list, the composer and focus modes; messages.js draws the
 * messages, panels.js the routines and settings/memories, page.js holds what they share.
 */

import { ChatdClient, forgetUser, rememberedMasterKey } from '/chatd-client.js';
import { SESSION, fresh, showSignIn } from '/demo/sign-in.js';
import { $, embeds, notice, page, panels, nodes, routines, updateCancel } from '/demo/page.js';
import { placeEmbed, renderSuggestions, upsertMessage } from '/demo/messages.js';
import { renderPanels, renderRoutines } from '/demo/panels.js';

const CHAT = 'chatd-demo-chat';
const FOCUS = 'chatd-demo-focus-modes';
const wsUrl = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/v1/ws`;

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
  $('[data-testid=cancel]').addEventListener('click', () => page.current && page.client?.cancel(page.current));
  $('#menu').addEventListener('click', () => $('#app').classList.toggle('menu'));
  $('#focus-toggle').addEventListener('click', toggleFocus);
  const saved = JSON.parse(sessionStorage.getItem(SESSION) ?? 'null');
  const key = saved && (await rememberedMasterKey(saved.user));
  await showSignIn(saved && key ? { who: saved, key } : null, enter);
}

async function signOut() {
  const saved = JSON.parse(sessionStorage.getItem(SESSION) ?? 'null');
  page.client?.close();
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
  page.client = await ChatdClient.open({ url: wsUrl, token, userId: user, masterKey: key, refreshToken: () => fresh(who) });
  const on = (/** @type {string} */ type, /** @type {(d: any) => void} */ f) =>
    page.client?.addEventListener(type, (e) => f(/** @type {CustomEvent} */ (e).detail));
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
    if (d.chat_id !== page.current || !page.client) return;
    // Its messages and embeds arrived before the key (a sync): shown now.
    for (const e of await page.client.chatEmbeds(d.chat_id)) embeds.set(e.embed_id, e);
    for (const m of await page.client.messages(d.chat_id)) upsertMessage(m, true);
  });
  on('message', (d) => d.message.chat_id === page.current && upsertMessage(d.message));
  on('embed', (d) => {
    embeds.set(d.embed.embed_id, d.embed);
    if (d.embed.chat_id === page.current) placeEmbed(d.embed);
  });
  on('suggestions', (d) => {
    for (const s of d.settings_memories ?? []) panels.set(s.hash, { kind: 'suggestion', chat_id: d.chat_id, data: s });
    if (d.chat_id === page.current) renderSuggestions(d.follow_ups, send);
    renderPanels();
  });
  on('task', (d) => {
    updateCancel();
    if (d.state === 'queued' && d.chat_id === page.current) notice(d.message || 'Queued: answered after the running answer.');
  });
  on('routine', (d) => {
    routines.set(d.routine.run_id, d.routine);
    renderRoutines();
  });
  on('focus', (d) => {
    if (d.active && d.focus_id) remember(d.focus_id);
    if (d.chat_id === page.current) renderFocus();
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
  renderChats(await page.client.listChats());
  const last = sessionStorage.getItem(CHAT);
  const chats = await page.client.listChats();
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
    li.setAttribute('aria-current', String(c.chat_id === page.current));
    li.addEventListener('click', () => {
      $('#app').classList.remove('menu');
      openChat(c.chat_id);
    });
    return li;
  }));
  const shown = chats.find((c) => c.chat_id === page.current);
  if (shown) $('#chat-title').textContent = shown.title;
  updateCancel();
}

async function newChat() {
  if (!page.client) return;
  $('#app').classList.remove('menu');
  await openChat(await page.client.newChat());
  $('[data-testid=chat-input]').focus();
}

/** @param {string} chatId */
async function openChat(chatId) {
  if (!page.client) return;
  page.current = chatId;
  sessionStorage.setItem(CHAT, chatId);
  page.client.setActiveChat(chatId);
  nodes.clear();
  $('#messages').replaceChildren();
  $('#suggestions').replaceChildren();
  $('#notices').replaceChildren();
  for (const e of await page.client.chatEmbeds(chatId)) embeds.set(e.embed_id, e);
  // In the client's order (each answer after its question), whatever the clocks say.
  for (const m of await page.client.messages(chatId)) upsertMessage(m, true);
  renderChats(await page.client.listChats());
  renderFocus();
  renderRoutines();
  renderPanels();
}

/** @param {string} text */
async function send(text) {
  if (!page.client || !text.trim()) return;
  if (!page.current) await openChat(await page.client.newChat());
  $('[data-testid=chat-input]').value = '';
  $('#suggestions').replaceChildren();
  await page.client.sendMessage(/** @type {string} */ (page.current), text.trim());
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
  const active = page.current && page.client?.focusOf(page.current);
  const shown = $('[data-testid=focus-indicator]');
  shown.hidden = !active;
  shown.textContent = active ? `Focus: ${active}` : '';
  $('#focus-id').hidden = Boolean(active);
  $('#focus-toggle').textContent = active ? 'End focus' : 'Focus';
  $('#focus-toggle').dataset.active = String(Boolean(active));
}

async function toggleFocus() {
  if (!page.client) return;
  if (!page.current) await openChat(await page.client.newChat());
  const chat = /** @type {string} */ (page.current);
  if (page.client.focusOf(chat)) return page.client.deactivateFocusMode(chat);
  const id = $('#focus-id').value.trim();
  if (!id) return $('#focus-id').focus();
  page.client.activateFocusMode(chat, id);
}

start();
