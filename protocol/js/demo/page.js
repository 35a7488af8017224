// @ts-check
/**
 * The demo page's shared state and small helpers (demo.js, messages.js and panels.js use
 * them): the client, the chat shown, what is on the screen by id, and the notices.
 */

/** @param {string} sel @returns {any} */
export const $ = (sel) => document.querySelector(sel);

/** The client once signed in, and the chat shown. */
export const page = {
  /** @type {import('/chatd-client.js').ChatdClient|null} */
  client: null,
  /** @type {string|null} */
  current: null,
};

/** @type {Map<string, HTMLElement>} message id -> element */
export const nodes = new Map();
/** @type {Map<string, import('/chatd-client.js').EmbedView>} */
export const embeds = new Map();
/** @type {Map<string, import('/chatd-client.js').RoutineView>} run id -> run */
export const routines = new Map();
/** Open settings requests, proposals and suggested entries, by id (each names its chat). @type {Map<string, {kind: string, chat_id: string, data: any}>} */
export const panels = new Map();
/** @type {Map<string, HTMLElement>} */
export const panelNodes = new Map();

/** A new element with a class, text and a test id. @param {string} tag @param {{cls?: string, text?: string, testid?: string}} [o] */
export function el(tag, o = {}) {
  const n = document.createElement(tag);
  if (o.cls) n.className = o.cls;
  if (o.text !== undefined) n.textContent = o.text;
  if (o.testid) n.dataset.testid = o.testid;
  return n;
}

/** A button. @param {string} text @param {() => void} onClick @param {string} [testid] */
export function button(text, onClick, testid) {
  const b = /** @type {HTMLButtonElement} */ (el('button', { text, testid }));
  b.type = 'button';
  b.addEventListener('click', onClick);
  return b;
}

export function updateCancel() {
  $('[data-testid=cancel]').hidden = !(page.current && page.client?.running.has(page.current));
}

/** @param {string} text */
export function notice(text) {
  $('#notices').replaceChildren(el('div', { text, testid: 'notice' }));
}
