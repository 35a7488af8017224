// @ts-check
/**
 * chatd-client.js: the reference browser client of chatd (see README.md beside it).
 *
 * A dependency-free ES module, no build step. It owns one WebSocket to chatd (ping,
 * reconnect with backoff, `resume_ai_task` for answers that were streaming), the user's
 * end-to-end encryption (WebCrypto only: a master key from a passphrase or imported, one
 * AES-GCM key per chat wrapped by it), and the user's chats in IndexedDB (ciphertext at
 * rest), kept in step by phased sync and used to answer `request_chat_history` on its own.
 * A UI listens to the events it dispatches (see {@link ChatdClient}).
 *
 * What the client asks the server to store is ciphertext made here; the only plaintext it
 * sends is what the protocol wants in the clear for the model: a new message's content, and
 * the history and embeds it re-sends when the server asks for them.
 */

/** PBKDF2-SHA-256 iterations of {@link deriveMasterKey} (the least it accepts). */
export const PBKDF2_ITERATIONS = 600000;

const te = new TextEncoder();
const td = new TextDecoder();
/** First byte of every ciphertext this client makes: the format version. */
const FORMAT = 1;
/** Key usages of the master key and of chat keys (both wrap keys below them). */
const KEY_USAGES = /** @type {KeyUsage[]} */ (['encrypt', 'decrypt', 'wrapKey', 'unwrapKey']);

// ---------------------------------------------------------------------------------------
// Encoding and ids

/** @param {Uint8Array} bytes */
function b64(bytes) {
  let s = '';
  for (let i = 0; i < bytes.length; i += 0x8000) {
    s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(s);
}

/** @param {string} text */
function unb64(text) {
  const s = atob(text);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

/** A new random id (a UUID). */
export function newId() {
  return crypto.randomUUID();
}

/** Unix seconds now. */
function now() {
  return Math.floor(Date.now() / 1000);
}

/** Where a message without a local time sorts (answers after the question of their second). @param {number} createdAt @param {string} role */
function order(createdAt, role) {
  return createdAt * 1000 + (role === 'user' ? 0 : 500);
}

/**
 * Lowercase hex SHA-256 of a string (the `hashed_*` ids chatd stores).
 * @param {string} text
 */
export async function sha256Hex(text) {
  const d = new Uint8Array(await crypto.subtle.digest('SHA-256', te.encode(text)));
  return Array.from(d, (b) => b.toString(16).padStart(2, '0')).join('');
}

// ---------------------------------------------------------------------------------------
// Keys and ciphertext

/**
 * The user's master key from a passphrase: PBKDF2-SHA-256 with a per-user salt (SHA-256
 * of a fixed label and the user id, so every device of the user derives the same key and
 * nothing needs storing), at least {@link PBKDF2_ITERATIONS} iterations. Not extractable:
 * no script can read it; the passphrase never leaves this function.
 * @param {string} userId
 * @param {string} passphrase
 * @param {{iterations?: number}} [options]
 * @returns {Promise<CryptoKey>}
 */
export async function deriveMasterKey(userId, passphrase, options = {}) {
  const iterations = options.iterations ?? PBKDF2_ITERATIONS;
  if (iterations < PBKDF2_ITERATIONS) {
    throw new RangeError(`PBKDF2 needs at least ${PBKDF2_ITERATIONS} iterations`);
  }
  if (!passphrase) throw new TypeError('an empty passphrase');
  const salt = await crypto.subtle.digest('SHA-256', te.encode(`chatd master-key salt v1\u0000${userId}`));
  const base = await crypto.subtle.importKey('raw', te.encode(passphrase), 'PBKDF2', false, ['deriveKey']);
  return crypto.subtle.deriveKey(
    { name: 'PBKDF2', hash: 'SHA-256', salt, iterations },
    base,
    { name: 'AES-GCM', length: 256 },
    false,
    KEY_USAGES,
  );
}

/**
 * A master key from 32 raw bytes (a key the application keeps elsewhere).
 * @param {Uint8Array} raw
 * @returns {Promise<CryptoKey>}
 */
export async function importMasterKey(raw) {
  if (raw.length !== 32) throw new RangeError('a master key has 32 bytes');
  return crypto.subtle.importKey('raw', raw, { name: 'AES-GCM' }, false, KEY_USAGES);
}

/**
 * AES-GCM: base64 of `[1][12-byte IV][ciphertext+tag]`, bound to `aad`.
 * @param {CryptoKey} key @param {string} plaintext @param {string} aad
 */
async function seal(key, plaintext, aad) {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const ct = new Uint8Array(
    await crypto.subtle.encrypt({ name: 'AES-GCM', iv, additionalData: te.encode(aad) }, key, te.encode(plaintext)),
  );
  const out = new Uint8Array(13 + ct.length);
  out[0] = FORMAT;
  out.set(iv, 1);
  out.set(ct, 13);
  return b64(out);
}

/** @param {CryptoKey} key @param {string} sealed @param {string} aad */
async function unseal(key, sealed, aad) {
  const bytes = unb64(sealed);
  if (bytes[0] !== FORMAT) throw new Error('unknown ciphertext format');
  const pt = await crypto.subtle.decrypt(
    { name: 'AES-GCM', iv: bytes.subarray(1, 13), additionalData: te.encode(aad) },
    key,
    bytes.subarray(13),
  );
  return td.decode(pt);
}

/** @param {CryptoKey} wrapping @param {CryptoKey} key @param {string} aad */
async function wrap(wrapping, key, aad) {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const ct = new Uint8Array(
    await crypto.subtle.wrapKey('raw', key, wrapping, { name: 'AES-GCM', iv, additionalData: te.encode(aad) }),
  );
  const out = new Uint8Array(13 + ct.length);
  out[0] = FORMAT;
  out.set(iv, 1);
  out.set(ct, 13);
  return b64(out);
}

/** @param {CryptoKey} wrapping @param {string} wrapped @param {string} aad */
async function unwrap(wrapping, wrapped, aad) {
  const bytes = unb64(wrapped);
  if (bytes[0] !== FORMAT) throw new Error('unknown wrapped-key format');
  return crypto.subtle.unwrapKey(
    'raw',
    bytes.subarray(13),
    wrapping,
    { name: 'AES-GCM', iv: bytes.subarray(1, 13), additionalData: te.encode(aad) },
    { name: 'AES-GCM' },
    false,
    KEY_USAGES,
  );
}

/** A fresh AES-256-GCM key, extractable only so it can be wrapped once. */
function generateKey() {
  return crypto.subtle.generateKey({ name: 'AES-GCM', length: 256 }, true, KEY_USAGES);
}

/** Associated data: what a ciphertext is, so one cannot stand in for another. */
const AAD = {
  chatKey: (/** @type {string} */ chat) => `chatd/v1/chat-key/${chat}`,
  chat: (/** @type {string} */ chat, /** @type {string} */ field) => `chatd/v1/chat/${chat}/${field}`,
  message: (/** @type {string} */ chat, /** @type {string} */ id) => `chatd/v1/chat/${chat}/message/${id}`,
  thinking: (/** @type {string} */ chat, /** @type {string} */ id) => `chatd/v1/chat/${chat}/message/${id}/thinking`,
  embed: (/** @type {string} */ id, /** @type {string} */ field) => `chatd/v1/embed/${id}/${field}`,
  embedKey: (/** @type {string} */ id) => `chatd/v1/embed-key/${id}`,
};

// ---------------------------------------------------------------------------------------
// IndexedDB: the user's chats, ciphertext at rest

/**
 * @typedef {{messages_v?: number, title_v?: number, last_edited_overall_timestamp?: number}} Versions
 * @typedef {{chat_id: string, encrypted_chat_key?: string, encrypted_title?: string,
 *   encrypted_icon?: string, encrypted_category?: string, encrypted_follow_up_suggestions?: string,
 *   encrypted_chat_summary?: string, encrypted_chat_tags?: string, versions?: Versions,
 *   updated_at: number, stored?: boolean}} ChatRecord
 * @typedef {{message_id: string, chat_id: string, role: 'user'|'assistant'|'system',
 *   encrypted_content: string, created_at: number, at?: number, user_message_id?: string,
 *   encrypted_model_name?: string, encrypted_category?: string, stored?: boolean,
 *   confirmed?: boolean, encrypted_thinking_content?: string, replaces_through?: string}} MessageRecord
 * @typedef {{embed_id: string, chat_id: string, message_id?: string, encrypted_type: string,
 *   encrypted_content: string, encrypted_embed_key: string, status?: string, hashed_message_id?: string,
 *   unstored?: {embed: any, keys?: any},
 *   version_number?: number, parent_embed_id?: string, embed_ids?: string[],
 *   skill_task_id?: string}} EmbedRecord
 * @typedef {{task_id: string, chat_id: string, user_message_id: string, sequence: number,
 *   at?: number, encrypted_content?: string}} StreamRecord
 */

const STORES = ['chats', 'messages', 'embeds', 'streams', 'session'];

/** @param {IDBRequest} req @returns {Promise<any>} */
function done(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

/** One user's database `chatd:<user>`: chats, messages, embeds, streaming answers, the key. */
export class LocalStore {
  /** @param {IDBDatabase} db */
  constructor(db) {
    this.db = db;
  }

  /** @param {string} userId @returns {Promise<LocalStore>} */
  static async open(userId) {
    const req = indexedDB.open(`chatd:${userId}`, 1);
    req.onupgradeneeded = () => {
      const db = req.result;
      db.createObjectStore('chats', { keyPath: 'chat_id' });
      db.createObjectStore('messages', { keyPath: 'message_id' }).createIndex('chat', 'chat_id');
      db.createObjectStore('embeds', { keyPath: 'embed_id' }).createIndex('chat', 'chat_id');
      db.createObjectStore('streams', { keyPath: 'task_id' });
      db.createObjectStore('session', { keyPath: 'name' });
    };
    return new LocalStore(await done(req));
  }

  /** @param {string} store @param {IDBTransactionMode} mode */
  os(store, mode) {
    return this.db.transaction(store, mode).objectStore(store);
  }
  /** @param {string} store @param {string} key */
  get(store, key) {
    return done(this.os(store, 'readonly').get(key));
  }
  /** @param {string} store @param {any} value */
  put(store, value) {
    return done(this.os(store, 'readwrite').put(value));
  }
  /** @param {string} store @param {string} key */
  delete(store, key) {
    return done(this.os(store, 'readwrite').delete(key));
  }
  /** @param {string} store */
  all(store) {
    return done(this.os(store, 'readonly').getAll());
  }
  /** @param {'messages'|'embeds'} store @param {string} chatId */
  byChat(store, chatId) {
    return done(this.os(store, 'readonly').index('chat').getAll(chatId));
  }
  /** Everything of one chat. @param {string} chatId */
  async deleteChat(chatId) {
    for (const store of /** @type {const} */ (['messages', 'embeds'])) {
      for (const r of await this.byChat(store, chatId)) {
        await this.delete(store, store === 'messages' ? r.message_id : r.embed_id);
      }
    }
    await this.delete('chats', chatId);
  }
  /** Drops the whole database (sign-out). */
  async destroy() {
    const name = this.db.name;
    this.db.close();
    await done(indexedDB.deleteDatabase(name));
  }
}

/**
 * Keeps a (non-extractable) master key in the user's IndexedDB, so a reload of the page
 * needs no passphrase; the key's bytes stay unreadable to scripts.
 * @param {string} userId @param {CryptoKey} key
 */
export async function rememberMasterKey(userId, key) {
  const store = await LocalStore.open(userId);
  await store.put('session', { name: 'master', key });
  store.db.close();
}

/** @param {string} userId @returns {Promise<CryptoKey|null>} */
export async function rememberedMasterKey(userId) {
  const store = await LocalStore.open(userId);
  const r = await store.get('session', 'master');
  store.db.close();
  return r ? r.key : null;
}

/** A fixed text sealed with the master key: opens only with the same passphrase. */
const KEY_CHECK = 'chatd key check v1';

/** The additional data a user's check value is sealed with. @param {string} userId */
const checkAad = (userId) => `chatd/v1/key-check/${userId}`;

/** Whether `sealed` is the check value of `key`. @param {CryptoKey} key @param {string} sealed @param {string} userId */
async function opensCheck(key, sealed, userId) {
  try {
    return (await unseal(key, sealed, checkAad(userId))) === KEY_CHECK;
  } catch {
    return false;
  }
}

/** This browser's copy of the user's check value (database `chatd-keys`, kept on sign-out). @param {(os: IDBObjectStore) => IDBRequest} op @param {IDBTransactionMode} mode */
async function localCheck(op, mode) {
  const req = indexedDB.open('chatd-keys', 1);
  req.onupgradeneeded = () => req.result.createObjectStore('checks', { keyPath: 'user' });
  /** @type {IDBDatabase} */
  const db = await done(req);
  try {
    return await done(op(db.transaction('checks', mode).objectStore('checks')));
  } finally {
    db.close();
  }
}

/**
 * Whether `key` may be the user's master key, from this browser alone: `false` when the
 * check value this browser keeps for the user does not open with it (another passphrase,
 * refused at once), else `true` (the same key, or a browser that has not seen the user:
 * {@link verifyMasterKey} asks the server). Writes nothing.
 * @param {string} userId @param {CryptoKey} key @returns {Promise<boolean>}
 */
export async function checkMasterKey(userId, key) {
  const r = await localCheck((os) => os.get(userId), 'readonly');
  return !r || opensCheck(key, r.check, userId);
}

/**
 * Whether `key` is the user's master key, asked of the server before anything is written:
 * sends this key's check value (`key_check`, kept when the user has none yet: the first
 * passphrase is the user's) over a short-lived socket and opens the one the server keeps.
 * A key that opens it is remembered in this browser ({@link checkMasterKey}). Throws when
 * the server cannot be asked.
 * @param {{url: string, token: string, userId: string, masterKey: CryptoKey}} o
 * @returns {Promise<boolean>}
 */
export async function verifyMasterKey({ url, token, userId, masterKey }) {
  const mine = await seal(masterKey, KEY_CHECK, checkAad(userId));
  const u = new URL(url, location.href);
  u.searchParams.set('token', token);
  const ws = new WebSocket(u);
  /** @type {string} */
  const stored = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the server did not answer the key check')), 15000);
    ws.onopen = () => ws.send(JSON.stringify({ type: 'key_check', payload: { encrypted_check: mine } }));
    ws.onmessage = (e) => {
      const f = JSON.parse(String(e.data));
      if (f.type === 'key_check') resolve(f.payload.encrypted_check);
      else if (f.type === 'error') reject(new Error(`${f.payload.code}: ${f.payload.message}`));
      else return;
      clearTimeout(timer);
    };
    ws.onclose = (e) => {
      clearTimeout(timer);
      reject(new Error(`the server closed the connection (${e.code})`));
    };
  }).finally(() => ws.close(1000));
  const ok = await opensCheck(masterKey, stored, userId);
  if (ok) await localCheck((os) => os.put({ user: userId, check: stored }), 'readwrite');
  return ok;
}

/** Forgets the user's key and every local copy of their chats. @param {string} userId */
export async function forgetUser(userId) {
  await (await LocalStore.open(userId)).destroy();
}

/**
 * The app and skill of a skill's embed, from its TOON content (`app_id: web` and
 * `skill_id: search` lines), so a card keeps its label on every device and after a reload.
 * @param {string|undefined} content @returns {{app_id?: string, skill_id?: string}}
 */
export function skillOf(content) {
  /** @type {any} */
  const out = {};
  for (const line of (content ?? '').split('\n', 20)) {
    const m = /^(app_id|skill_id): *"?([A-Za-z0-9_.-]+)"?$/.exec(line);
    if (m && !out[m[1]]) out[m[1]] = m[2];
  }
  return out;
}

/**
 * The hash `reject_settings_memory_suggestion` names a suggestion by: SHA-256 hex of
 * `app_id:item_type:` and the lower-cased title.
 * @param {{app_id: string, item_type: string, suggested_title: string}} s
 */
export function suggestionHash(s) {
  return sha256Hex(`${s.app_id}:${s.item_type}:${s.suggested_title.toLowerCase()}`);
}

// ---------------------------------------------------------------------------------------
// The client

/**
 * @typedef {'connecting'|'open'|'reconnecting'|'closed'} ConnectionState
 * @typedef {{chat_id: string, title: string, updated_at: number, running: boolean}} ChatSummary
 * @typedef {{message_id: string, chat_id: string, role: 'user'|'assistant'|'system',
 *   content: string, created_at: number, at: number, state: 'streaming'|'done', task_id?: string,
 *   links_repaired?: boolean, error_code?: string, interrupted?: boolean,
 *   interrupted_by_shutdown?: boolean, model_name?: string, pending?: boolean,
 *   thinking?: string, thinking_done?: boolean, replaces_through?: string}} ChatMessage
 * @typedef {{run_id: string, chat_id: string, routine: string,
 *   state: 'running'|'waiting'|'finished', status?: string, question?: string,
 *   information: string[], errors: string[], outcome?: string}} RoutineView
 * @typedef {{embed_id: string, chat_id: string, message_id?: string, type?: string,
 *   content?: string, status: string, skill_task_id?: string, app_id?: string,
 *   skill_id?: string, parent_embed_id?: string, embed_ids?: string[],
 *   injection_flagged?: boolean}} EmbedView
 *
 * @typedef {Object} ClientOptions
 * @property {string} url WebSocket URL, e.g. `ws://127.0.0.1:8787/v1/ws` (the token is added)
 * @property {string} token session token (also the only thing put into a URL)
 * @property {string} userId the token's user, names the IndexedDB database
 * @property {CryptoKey} masterKey from {@link deriveMasterKey} or {@link importMasterKey}
 * @property {string} [sessionId] names the device (default: a new id per client)
 * @property {number} [pingInterval] ms between pings (default 20000)
 * @property {number} [maxBackoff] longest wait between reconnects in ms (default 10000)
 * @property {() => Promise<string>} [refreshToken] a fresh token when the current one expires
 */

/**
 * The client. Events (all `CustomEvent`s; the payload is `event.detail`):
 * - `connection` `{state: ConnectionState, code?: number}`
 * - `chats` `{chats: ChatSummary[]}` the chat list changed
 * - `message` `{message: ChatMessage}` a message appeared or changed (answers: every frame)
 * - `reasoning` `{chat_id, task_id, step, data}` preprocessing steps (title, mate, model)
 * - `embed` `{embed: EmbedView}`; `skill` `{chat_id, skill_task_id, embed_id?, status, app_id, skill_id}`
 * - `suggestions` `{chat_id, follow_ups: string[], new_chat: string[]}`
 * - `task` `{chat_id, task_id, state: 'started'|'queued'|'waiting'|'done'}`
 * - `history_resent` `{chat_id, message_id, messages: number}` (answered `request_chat_history`)
 * - `chat_key` `{chat_id}` a chat's key became usable: its stored messages can be read now
 * - `sync` `{phase}` a sync phase landed in IndexedDB
 * - `error` `{code, message, chat_id?, message_id?}`
 */
export class ChatdClient extends EventTarget {
  /** @param {ClientOptions} options @param {LocalStore} store */
  constructor(options, store) {
    super();
    this.options = options;
    this.store = store;
    this.sessionId = options.sessionId ?? newId();
    /** @type {ConnectionState} */
    this.state = 'closed';
    /** @type {WebSocket|null} */
    this.ws = null;
    this.attempt = 0;
    this.stopped = false;
    /** @type {Map<string, CryptoKey>} */
    this.chatKeys = new Map();
    /** @type {Map<string, string>} chat id -> plaintext title */
    this.titles = new Map();
    /** Names marked private per chat (`markPrivate`). @type {Map<string, string[]>} */
    this.privateNames = new Map();
    /** @type {Map<string, {title: string, icon_names?: string[], category?: string}>} task id -> a title step before its typing frame */
    this.earlyTitles = new Map();
    /** @type {string|null} */
    this.activeChat = null;
    /** @type {Map<string, ChatMessage & {sequence: number, user_message_id: string}>} running answers */
    this.answers = new Map();
    /** @type {Map<string, string>} chat id -> its running task */
    this.running = new Map();
    /** @type {Set<string>} tasks whose answer is complete here */
    this.finished = new Set();
    /** @type {Map<string, ChatMessage>} messages of other devices not stored yet */
    this.unstored = new Map();
    /** @type {Map<string, EmbedView>} */
    this.embeds = new Map();
    /** @type {Map<string, string[]>} hashed message id -> embeds synced before that message (their ids) */
    this.waitingEmbeds = new Map();
    /** @type {Map<string, RoutineView>} run id -> routine run (shown, not stored) */
    this.routines = new Map();
    /** @type {Map<string, string>} chat id -> its active focus mode */
    this.focus = new Map();
    /** @type {Map<string, any>} request id -> an unanswered `request_app_settings_memories` */
    this.settingsRequests = new Map();
    /** @type {Map<string, any>} proposal id -> an undecided `app_settings_memories_proposal` */
    this.proposals = new Map();
    /** @type {Map<string, {content: string, done: boolean}>} task id -> reasoning so far (memory only) */
    this.thinking = new Map();
    /** @type {Map<string, {chat_id: string, content: string, created_at: number, at: number}>} user messages written here the server has not confirmed */
    this.sending = new Map();
    /** @type {Map<string, {chat_id: string, content: string, created_at: number, at: number}>} user messages an earlier page wrote and never saw confirmed: into `sending` after the first sync */
    this.earlier = new Map();
    /** @type {ReturnType<typeof setTimeout>|undefined} */
    this.timer = undefined;
    this.lastSeen = 0;
    /** @type {Promise<void>} frames are handled one at a time, in order */
    this.queue = Promise.resolve();
  }

  /**
   * Opens the user's local store and connects.
   * @param {ClientOptions} options
   * @returns {Promise<ChatdClient>}
   */
  static async open(options) {
    const client = new ChatdClient(options, await LocalStore.open(options.userId));
    await client.loadLocal();
    client.connect();
    return client;
  }

  // ---- events

  /** @param {string} type @param {any} detail */
  emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  /** @param {string} code @param {string} message @param {any} [extra] */
  fail(code, message, extra = {}) {
    this.emit('error', { code, message, ...extra });
  }

  // ---- connection

  connect() {
    this.stopped = false;
    this.setState(this.attempt ? 'reconnecting' : 'connecting');
    const url = new URL(this.options.url, location.href);
    url.searchParams.set('token', this.options.token);
    url.searchParams.set('sessionId', this.sessionId);
    const ws = new WebSocket(url);
    this.ws = ws;
    ws.onopen = () => this.opened();
    ws.onmessage = (e) => this.received(e.data);
    ws.onclose = (e) => this.closed(ws, e.code);
  }

  /** Closes for good (no reconnect). */
  close() {
    this.stopped = true;
    clearTimeout(this.timer);
    this.ws?.close(1000);
    this.store.db.close();
    this.setState('closed');
  }

  /** @param {ConnectionState} state @param {number} [code] */
  setState(state, code) {
    this.state = state;
    this.emit('connection', { state, code });
  }

  async opened() {
    this.attempt = 0;
    this.lastSeen = Date.now();
    this.setState('open');
    this.schedulePing();
    if (this.activeChat) this.send({ type: 'set_active_chat', payload: { chat_id: this.activeChat } });
    // Messages sent while the socket was down, or not yet confirmed: sent (again). The server
    // answers a message id once, so a copy it already has only gets confirmed. (Those of an
    // earlier page join them after the sync: resendEarlier.)
    for (const id of this.sending.keys()) this.resend(id);
    // Answers that were streaming when the page or the socket went away.
    for (const s of /** @type {StreamRecord[]} */ (await this.store.all('streams'))) {
      if (this.finished.has(s.task_id)) continue;
      await this.restoreStream(s);
      this.send({ type: 'resume_ai_task', payload: { chat_id: s.chat_id, task_id: s.task_id, last_sequence: s.sequence } });
    }
    await this.sync();
  }

  /** Sends a user message of `sending` (again), with the same id. @param {string} id */
  resend(id) {
    const m = this.sending.get(id);
    if (m) this.sendAdded(m.chat_id, id, m.content, m.created_at, null);
  }

  /**
   * After the first sync of this client: the messages an earlier page wrote and never saw
   * confirmed go the way of any unconfirmed message (`sending`, sent again now and on every
   * reconnect until confirmed), except those the sync showed stored on the server (their
   * confirmation was lost, not the message).
   */
  async resendEarlier() {
    for (const [id, m] of [...this.earlier]) {
      this.earlier.delete(id);
      /** @type {MessageRecord|undefined} */
      const r = await this.store.get('messages', id);
      if (!r) continue;
      if (r.stored) {
        this.emit('message', { message: { message_id: id, chat_id: m.chat_id, role: 'user', content: m.content, created_at: m.created_at, at: m.at, state: 'done', pending: false } });
        continue;
      }
      this.sending.set(id, m);
      this.resend(id);
    }
  }

  /**
   * Answers (and routine messages, settings requests) this device finished whose storing the
   * server never confirmed (the socket or the server went away first): sent again after a
   * sync; the server stores a message id once.
   */
  async resendAnswers() {
    for (const r of /** @type {any[]} */ (await this.store.all('embeds'))) {
      if (!r.unstored) continue;
      const keys = r.unstored.keys?.keys;
      this.send({ type: 'store_embed', payload: keys ? { ...r.unstored.embed, embed_keys: keys } : r.unstored.embed });
    }
    for (const r of /** @type {MessageRecord[]} */ (await this.store.all('messages'))) {
      if (r.role === 'user' || r.stored !== false || !this.chatKeys.has(r.chat_id)) continue;
      /** @type {any} */
      const message = { message_id: r.message_id, role: r.role, encrypted_content: r.encrypted_content, created_at: r.created_at };
      if (r.user_message_id) message.user_message_id = r.user_message_id;
      if (r.encrypted_model_name) message.encrypted_model_name = r.encrypted_model_name;
      if (r.encrypted_thinking_content) Object.assign(message, { encrypted_thinking_content: r.encrypted_thinking_content, has_thinking: true });
      this.send({ type: 'ai_response_completed', payload: { chat_id: r.chat_id, message } });
    }
  }

  /** @param {WebSocket} ws @param {number} code */
  closed(ws, code) {
    if (this.ws !== ws) return;
    clearTimeout(this.timer);
    this.ws = null;
    if (this.stopped) return this.setState('closed', code);
    this.setState('reconnecting', code);
    if (code === 4002 && this.options.refreshToken) {
      this.options.refreshToken().then((t) => {
        this.options.token = t;
        this.reconnectLater();
      }, () => this.fail('token_expired', 'the session token expired'));
      return;
    }
    if (code === 4002) return this.fail('token_expired', 'the session token expired; sign in again');
    this.reconnectLater();
  }

  reconnectLater() {
    // 1012 (restart): at once; otherwise exponential backoff with jitter.
    const max = this.options.maxBackoff ?? 10000;
    const wait = this.attempt === 0 ? 100 : Math.min(max, 250 * 2 ** this.attempt) * (0.5 + Math.random() / 2);
    this.attempt++;
    this.timer = setTimeout(() => this.connect(), wait);
  }

  schedulePing() {
    const every = this.options.pingInterval ?? 20000;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      if (!this.ws) return;
      // Nothing heard for two intervals: the socket is dead, whatever the browser says.
      if (Date.now() - this.lastSeen > 2 * every) return this.ws.close(4000);
      this.send({ type: 'ping' });
      this.schedulePing();
    }, every);
  }

  /** @param {{type: string, payload?: any}} frame @returns {boolean} sent */
  send(frame) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify({ type: frame.type, payload: frame.payload ?? {} }));
    return true;
  }

  // ---- local state

  async loadLocal() {
    for (const c of /** @type {ChatRecord[]} */ (await this.store.all('chats'))) await this.openChatRecord(c);
    await this.loadUnconfirmed();
    this.emitChats();
  }

  /**
   * User messages an earlier page wrote and never saw confirmed (the page reloaded or
   * closed first): shown as pending, and sent again after the first sync (resendEarlier),
   * with the same id (the server answers an id once: a copy it has only gets confirmed, and
   * is then stored as usual).
   */
  async loadUnconfirmed() {
    for (const r of /** @type {MessageRecord[]} */ (await this.store.all('messages'))) {
      // Only sendMessage writes `confirmed: false`; the confirmation (or a synced copy) ends it.
      if (r.role !== 'user' || r.confirmed !== false || r.stored || this.sending.has(r.message_id)) continue;
      const key = this.chatKeys.get(r.chat_id);
      if (!key) continue;
      try {
        const content = await unseal(key, r.encrypted_content, AAD.message(r.chat_id, r.message_id));
        this.earlier.set(r.message_id, { chat_id: r.chat_id, content, created_at: r.created_at, at: r.at ?? order(r.created_at, r.role) });
      } catch {
        this.fail('decryption_failed', 'a message does not open', { chat_id: r.chat_id, message_id: r.message_id });
      }
    }
  }

  /** Unwraps a chat's key and decrypts its title. @param {ChatRecord} c */
  async openChatRecord(c) {
    if (!this.chatKeys.has(c.chat_id) && c.encrypted_chat_key) {
      try {
        this.chatKeys.set(c.chat_id, await unwrap(this.options.masterKey, c.encrypted_chat_key, AAD.chatKey(c.chat_id)));
        // Messages that arrived before the key (a sync sends content before metadata) open now.
        this.emit('chat_key', { chat_id: c.chat_id });
      } catch {
        this.fail('decryption_failed', 'a chat key does not open with this master key (another passphrase?)', { chat_id: c.chat_id });
        return;
      }
    }
    const key = this.chatKeys.get(c.chat_id);
    if (key && c.encrypted_title) {
      try {
        this.titles.set(c.chat_id, await unseal(key, c.encrypted_title, AAD.chat(c.chat_id, 'title')));
      } catch {
        this.fail('decryption_failed', 'a chat title does not open', { chat_id: c.chat_id });
      }
    }
  }

  /** @returns {Promise<ChatSummary[]>} newest first */
  async listChats() {
    const chats = /** @type {ChatRecord[]} */ (await this.store.all('chats'));
    const seen = new Set(chats.map((c) => c.chat_id));
    const out = chats.map((c) => ({
      chat_id: c.chat_id,
      title: this.titles.get(c.chat_id) ?? 'New chat',
      updated_at: c.versions?.last_edited_overall_timestamp ?? c.updated_at,
      running: this.running.has(c.chat_id),
    }));
    for (const m of this.unstored.values()) {
      if (seen.has(m.chat_id)) continue;
      seen.add(m.chat_id);
      out.push({ chat_id: m.chat_id, title: this.titles.get(m.chat_id) ?? 'New chat', updated_at: m.created_at, running: this.running.has(m.chat_id) });
    }
    return out.sort((a, b) => b.updated_at - a.updated_at);
  }

  async emitChats() {
    this.emit('chats', { chats: await this.listChats() });
  }

  /**
   * A chat's messages, decrypted, oldest first, with answers still streaming at the end.
   * @param {string} chatId @returns {Promise<ChatMessage[]>}
   */
  async messages(chatId) {
    const key = this.chatKeys.get(chatId);
    /** @type {Map<string, ChatMessage>} */
    const out = new Map();
    /** @type {Map<string, string>} answer id -> the user message it answers */
    const answers = new Map();
    for (const r of /** @type {MessageRecord[]} */ (await this.store.byChat('messages', chatId))) {
      if (!key) break;
      if (r.role !== 'user' && r.user_message_id) answers.set(r.message_id, r.user_message_id);
      try {
        out.set(r.message_id, {
          message_id: r.message_id, chat_id: chatId, role: r.role, created_at: r.created_at, state: 'done',
          at: r.at ?? order(r.created_at, r.role),
          ...(r.replaces_through ? { replaces_through: r.replaces_through } : {}),
          content: await unseal(key, r.encrypted_content, AAD.message(chatId, r.message_id)),
          ...(r.role === 'user' ? { pending: this.sending.has(r.message_id) || this.earlier.has(r.message_id) } : {}),
          ...(r.encrypted_thinking_content ? { thinking: await unseal(key, r.encrypted_thinking_content, AAD.thinking(chatId, r.message_id)), thinking_done: true } : {}),
        });
      } catch {
        this.fail('decryption_failed', 'a message does not open', { chat_id: chatId, message_id: r.message_id });
      }
    }
    for (const m of [...this.unstored.values(), ...this.answers.values()]) {
      if (m.chat_id === chatId && !out.has(m.message_id)) out.set(m.message_id, { ...m, ...this.thoughtOf(m.message_id) });
    }
    for (const a of this.answers.values()) if (a.chat_id === chatId) answers.set(a.message_id, a.user_message_id);
    // Clocks of devices (and whole seconds from the server) do not order a chat: each answer
    // follows the message it answers; the rest goes by time.
    const byAt = (/** @type {ChatMessage} */ a, /** @type {ChatMessage} */ b) => a.at - b.at;
    const all = [...out.values()].sort(byAt);
    const placed = (/** @type {ChatMessage} */ m) => {
      const q = answers.get(m.message_id);
      return m.role !== 'user' && q !== undefined && out.get(q)?.role === 'user';
    };
    /** @type {ChatMessage[]} */
    const ordered = [];
    for (const m of all) {
      if (placed(m)) continue;
      ordered.push(m);
      if (m.role === 'user') ordered.push(...all.filter((a) => placed(a) && answers.get(a.message_id) === m.message_id));
    }
    return ordered;
  }

  /** Embeds of a chat (decrypted), by id. @param {string} chatId @returns {Promise<EmbedView[]>} */
  async chatEmbeds(chatId) {
    /** @type {Map<string, EmbedView>} */
    const out = new Map();
    const key = this.chatKeys.get(chatId);
    for (const r of /** @type {EmbedRecord[]} */ (await this.store.byChat('embeds', chatId))) {
      // An embed synced before its answer: placed once the answer is here.
      if (!r.message_id && r.hashed_message_id) {
        for (const m of /** @type {MessageRecord[]} */ (await this.store.byChat('messages', chatId))) {
          if ((await sha256Hex(m.message_id)) === r.hashed_message_id) r.message_id = m.message_id;
        }
        if (r.message_id) await this.store.put('embeds', r);
      }
      const view = key && (await this.openEmbed(r, key));
      if (view) out.set(r.embed_id, view);
    }
    for (const e of this.embeds.values()) if (e.chat_id === chatId) out.set(e.embed_id, e);
    return [...out.values()];
  }

  /** @param {EmbedRecord} r @param {CryptoKey} chatKey @returns {Promise<EmbedView|null>} */
  async openEmbed(r, chatKey) {
    try {
      const key = await unwrap(chatKey, r.encrypted_embed_key, AAD.embedKey(r.embed_id));
      const content = await unseal(key, r.encrypted_content, AAD.embed(r.embed_id, 'content'));
      return {
        embed_id: r.embed_id, chat_id: r.chat_id, message_id: r.message_id, status: r.status ?? 'finished',
        type: await unseal(key, r.encrypted_type, AAD.embed(r.embed_id, 'type')), content,
        parent_embed_id: r.parent_embed_id, embed_ids: r.embed_ids, skill_task_id: r.skill_task_id,
        ...skillOf(content),
      };
    } catch {
      this.fail('decryption_failed', 'an embed does not open', { chat_id: r.chat_id });
      return null;
    }
  }

  // ---- what a UI calls

  /** A new chat: its id and key (nothing reaches the server before its first message). */
  async newChat() {
    const chatId = newId();
    const key = await generateKey();
    const record = /** @type {ChatRecord} */ ({
      chat_id: chatId, updated_at: now(), stored: false,
      encrypted_chat_key: await wrap(this.options.masterKey, key, AAD.chatKey(chatId)),
    });
    const usable = await unwrap(this.options.masterKey, /** @type {string} */ (record.encrypted_chat_key), AAD.chatKey(chatId));
    this.chatKeys.set(chatId, usable);
    await this.store.put('chats', record);
    await this.emitChats();
    return chatId;
  }

  /** Shows `chatId` (or none): its answers stream to this device. @param {string|null} chatId */
  setActiveChat(chatId) {
    this.activeChat = chatId;
    this.send({ type: 'set_active_chat', payload: { chat_id: chatId } });
  }

  /**
   * Sends a user message; the answer arrives as `message` events.
   * @param {string} chatId @param {string} content @returns {Promise<string>} the message id
   */
  async sendMessage(chatId, content) {
    const key = this.chatKeys.get(chatId);
    if (!key) throw new Error('unknown chat (no key): call newChat() first');
    const messageId = newId();
    const createdAt = now();
    const at = Date.now();
    await this.store.put('messages', /** @type {MessageRecord} */ ({
      message_id: messageId, chat_id: chatId, role: 'user', created_at: createdAt, at, stored: false, confirmed: false,
      encrypted_content: await seal(key, content, AAD.message(chatId, messageId)),
    }));
    this.sending.set(messageId, { chat_id: chatId, content, created_at: createdAt, at });
    const chat = /** @type {ChatRecord|undefined} */ (await this.store.get('chats', chatId));
    if (chat) {
      chat.updated_at = createdAt;
      await this.store.put('chats', chat);
    }
    if (this.activeChat !== chatId) this.setActiveChat(chatId);
    this.emit('message', { message: { message_id: messageId, chat_id: chatId, role: 'user', content, created_at: createdAt, at, state: 'done', pending: true } });
    this.sendAdded(chatId, messageId, content, createdAt, null);
    await this.emitChats();
    return messageId;
  }

  /**
   * @param {string} chatId @param {string} messageId @param {string} content
   * @param {number} createdAt @param {any[]|null} history @param {any[]} [embeds]
   */
  sendAdded(chatId, messageId, content, createdAt, history, embeds = []) {
    const title = this.titles.get(chatId);
    /** @type {any} */
    const message = { message_id: messageId, role: 'user', content, created_at: createdAt, chat_has_title: Boolean(title) };
    if (title) message.current_chat_title = title;
    if (history) message.message_history = history;
    const names = this.privateNames.get(chatId);
    this.send({ type: 'chat_message_added', payload: { chat_id: chatId, message, embeds, ...(names?.length ? { private_names: names } : {}) } });
  }

  /**
   * Marks names (people, companies) private in a chat: sent with its next messages as
   * `private_names`, so the server replaces them by placeholders before any model request
   * (it keeps them for the chat's later turns too). @param {string} chatId @param {string[]} names
   */
  markPrivate(chatId, names) {
    const kept = this.privateNames.get(chatId) ?? [];
    for (const n of names.map((s) => s.trim()).filter(Boolean)) if (!kept.includes(n)) kept.push(n);
    this.privateNames.set(chatId, kept.slice(0, 50));
  }

  /** Stops the answer running in `chatId`. @param {string} chatId */
  cancel(chatId) {
    const task = this.running.get(chatId);
    if (task) this.send({ type: 'cancel_ai_task', payload: { task_id: task, chat_id: chatId } });
  }

  /** Stops a running skill (its embed becomes `cancelled`, the answer goes on). @param {string} skillTaskId @param {string} [embedId] */
  cancelSkill(skillTaskId, embedId) {
    this.send({ type: 'cancel_skill', payload: { skill_task_id: skillTaskId, embed_id: embedId } });
  }

  /** Starts a focus mode (`app_id-focus_id`) in a chat; every device hears `focus`. @param {string} chatId @param {string} focusId */
  activateFocusMode(chatId, focusId) {
    this.send({ type: 'chat_focus_mode_activate', payload: { chat_id: chatId, focus_id: focusId } });
  }

  /** Ends the chat's focus mode. @param {string} chatId */
  deactivateFocusMode(chatId) {
    this.send({ type: 'chat_focus_mode_deactivate', payload: { chat_id: chatId } });
  }

  /**
   * Switches apps and single skills off (`app_id`, `app_id-skill_id`); the server keeps them
   * for a day from the last time they were sent, so send them after connecting. Every device
   * hears `app_preferences`.
   * @param {string[]} disabledApps @param {string[]} disabledSkills
   */
  setAppPreferences(disabledApps, disabledSkills) {
    this.send({ type: 'set_app_preferences', payload: { disabled_apps: disabledApps, disabled_skills: disabledSkills } });
  }

  /** @param {any} p a thinking frame @param {{content: string, done: boolean}} t */
  emitThinking(p, t) {
    this.emit('thinking', { chat_id: p.chat_id, task_id: p.task_id, message_id: p.message_id ?? p.task_id, content: t.content, done: t.done });
    const a = this.answers.get(p.task_id);
    if (a) this.emit('message', { message: { ...a, ...this.thoughtOf(p.task_id) } });
  }

  /** The reasoning of a running answer, for its `message` events. @param {string} taskId */
  thoughtOf(taskId) {
    const t = this.thinking.get(taskId);
    return t ? { thinking: t.content, thinking_done: t.done } : {};
  }

  /** The chat's active focus mode (`app_id-focus_id`), if any. @param {string} chatId */
  focusOf(chatId) {
    return this.focus.get(chatId) ?? null;
  }

  /** Stops a routine run (`cancel_routine`); every device hears `routine` finished. @param {string} runId */
  cancelRoutine(runId) {
    this.send({ type: 'cancel_routine', payload: { run_id: runId } });
  }

  /**
   * Answers a routine's question: the user's next message in the chat is the answer.
   * @param {string} chatId @param {string} text
   */
  answerRoutine(chatId, text) {
    return this.sendMessage(chatId, text);
  }

  /**
   * Answers `request_app_settings_memories`: entries `{app_id, item_key, content}` (the
   * category id as `item_key`, `content` one entry as JSON); none means "no". Every device
   * hears `settings_dismissed`.
   * @param {string} chatId @param {string} requestId @param {{app_id: string, item_key: string, content: any}[]} entries
   */
  confirmSettings(chatId, requestId, entries) {
    this.send({ type: 'app_settings_memories_confirmed', payload: { chat_id: chatId, request_id: requestId, app_settings_memories: entries } });
  }

  /** Declines a settings/memories request. @param {string} chatId @param {string} requestId */
  declineSettings(chatId, requestId) {
    this.confirmSettings(chatId, requestId, []);
  }

  /** Accepts or declines the model's proposal. @param {string} proposalId @param {boolean} accepted */
  answerProposal(proposalId, accepted) {
    this.proposals.delete(proposalId);
    this.send({ type: 'app_settings_memories_proposal_result', payload: { proposal_id: proposalId, accepted } });
  }

  /**
   * Rejects a suggested entry (from `suggestions`): never suggested again in the chat.
   * @param {string} chatId @param {{app_id: string, item_type: string, suggested_title: string}} suggestion
   */
  async rejectSuggestion(chatId, suggestion) {
    this.send({ type: 'reject_settings_memory_suggestion', payload: { chat_id: chatId, hash: await suggestionHash(suggestion) } });
  }

  /** @param {any} p a routine frame @param {(r: RoutineView) => void} edit */
  routine(p, edit) {
    let r = this.routines.get(p.run_id);
    if (!r) {
      r = { run_id: p.run_id, chat_id: p.chat_id, routine: p.routine ?? '', state: 'running', information: [], errors: [] };
      this.routines.set(p.run_id, r);
    }
    edit(r);
    this.emit('routine', { routine: { ...r, information: [...r.information], errors: [...r.errors] } });
  }

  /** Deletes a chat everywhere. @param {string} chatId */
  deleteChat(chatId) {
    this.send({ type: 'delete_chat', payload: { chat_id: chatId } });
  }

  /** Asks for what the server has and this device lacks. */
  async sync() {
    /** @type {Record<string, Versions>} */
    const versions = {};
    for (const c of /** @type {ChatRecord[]} */ (await this.store.all('chats'))) {
      if (c.stored && c.versions) versions[c.chat_id] = { messages_v: c.versions.messages_v, title_v: c.versions.title_v };
    }
    const embeds = /** @type {EmbedRecord[]} */ (await this.store.all('embeds')).map((e) => e.embed_id);
    this.send({ type: 'phased_sync_request', payload: { phase: 'all', client_chat_versions: versions, client_chat_ids: Object.keys(versions), client_embed_ids: embeds } });
  }

  // ---- frames from the server

  /** @param {any} data */
  async received(data) {
    this.lastSeen = Date.now();
    /** @type {{type: string, payload: any}} */
    let frame;
    try {
      frame = JSON.parse(data);
    } catch {
      return;
    }
    const handler = /** @type {Record<string, (p: any) => any>} */ (/** @type {unknown} */ (this.handlers))[frame.type];
    if (!handler) return;
    // One frame at a time, in order: handlers await IndexedDB and WebCrypto.
    this.queue = this.queue.then(() => handler.call(this, frame.payload)).catch((e) => {
      this.fail('client_error', `handling ${frame.type}: ${e && e.message}`);
    });
  }

  get handlers() {
    return HANDLERS;
  }

  /** @param {string} chatId @param {(c: ChatRecord) => void} edit */
  async editChat(chatId, edit) {
    const c = /** @type {ChatRecord} */ ((await this.store.get('chats', chatId)) ?? { chat_id: chatId, updated_at: now() });
    edit(c);
    await this.store.put('chats', c);
    return c;
  }

  /**
   * A generated title (from `ai_typing_started` or a later `title_generated` step), kept
   * once per chat; the device that wrote the chat's first message stores it, encrypted.
   * @param {string} chatId @param {string|undefined} userMessageId @param {string} title
   * @param {string[]|undefined} iconNames @param {string|undefined} category
   */
  async storeTitle(chatId, userMessageId, title, iconNames, category) {
    const key = this.chatKeys.get(chatId);
    if (!key || this.titles.has(chatId)) return;
    this.titles.set(chatId, title);
    const mine = userMessageId ? /** @type {MessageRecord|undefined} */ (await this.store.get('messages', userMessageId)) : undefined;
    if (mine) {
      const chat = /** @type {ChatRecord} */ (await this.editChat(chatId, () => {}));
      const encrypted_title = await seal(key, title, AAD.chat(chatId, 'title'));
      const encrypted_icon = await seal(key, (iconNames ?? []).join(','), AAD.chat(chatId, 'icon'));
      const encrypted_chat_category = await seal(key, category ?? '', AAD.chat(chatId, 'category'));
      await this.editChat(chatId, (c) => { c.encrypted_title = encrypted_title; c.encrypted_icon = encrypted_icon; c.encrypted_category = encrypted_chat_category; });
      this.send({ type: 'encrypted_chat_metadata', payload: {
        chat_id: chatId, encrypted_title, encrypted_icon, encrypted_chat_category,
        encrypted_chat_key: chat.encrypted_chat_key, versions: { title_v: 1 },
      } });
    }
    await this.emitChats();
  }

  /** A chat record from the server (sync, another device). @param {any} details */
  async mergeChat(details) {
    const c = await this.editChat(details.chat_id, (c) => {
      for (const [k, v] of Object.entries(details)) if (k.startsWith('encrypted_') && v != null) /** @type {any} */ (c)[k] = v;
      if (details.versions) c.versions = details.versions;
      c.stored = true;
    });
    await this.openChatRecord(c);
  }

  /**
   * A stored message from the server: from a sync (`index`: its place in the chat, oldest
   * first) or another device, now.
   * @param {string} chatId @param {any} m @param {number} [index]
   */
  async mergeMessage(chatId, m, index) {
    if (!m || !m.encrypted_content) return;
    // A copy this device has keeps its local time; a synced one goes by the server's order
    // within its second (the server's times are whole seconds); one relayed now, by now.
    const existing = /** @type {MessageRecord|undefined} */ (await this.store.get('messages', m.message_id));
    const at = existing?.at ?? this.unstored.get(m.message_id)?.at
      ?? (index === undefined ? Date.now() : m.created_at * 1000 + Math.min(index, 999));
    await this.store.put('messages', /** @type {MessageRecord} */ ({
      at, message_id: m.message_id, chat_id: chatId, role: m.role, created_at: m.created_at,
      encrypted_content: m.encrypted_content, user_message_id: m.user_message_id,
      encrypted_model_name: m.encrypted_model_name, encrypted_category: m.encrypted_category, stored: true,
      encrypted_thinking_content: m.encrypted_thinking_content, replaces_through: m.replaces_through,
    }));
    this.unstored.delete(m.message_id);
    const key = this.chatKeys.get(chatId);
    if (key) {
      try {
        const content = await unseal(key, m.encrypted_content, AAD.message(chatId, m.message_id));
        const thinking = m.encrypted_thinking_content ? await unseal(key, m.encrypted_thinking_content, AAD.thinking(chatId, m.message_id)) : undefined;
        if (!this.answers.has(m.message_id)) {
          this.emit('message', { message: { message_id: m.message_id, chat_id: chatId, role: m.role, content, created_at: m.created_at, at, state: 'done', ...(thinking ? { thinking, thinking_done: true } : {}), ...(m.replaces_through ? { replaces_through: m.replaces_through } : {}) } });
        }
      } catch {
        this.fail('decryption_failed', 'a message does not open', { chat_id: chatId, message_id: m.message_id });
      }
    }
    await this.placeWaitingEmbeds(chatId, m.message_id);
  }

  /**
   * Embeds synced before the answer they belong to: given its id now that it is here, and
   * shown (a page places an embed by its message).
   * @param {string} chatId @param {string} messageId
   */
  async placeWaitingEmbeds(chatId, messageId) {
    if (!this.waitingEmbeds.size) return;
    const hashed = await sha256Hex(messageId);
    const waiting = this.waitingEmbeds.get(hashed);
    if (!waiting) return;
    this.waitingEmbeds.delete(hashed);
    const key = this.chatKeys.get(chatId);
    for (const id of waiting) {
      const r = /** @type {EmbedRecord|undefined} */ (await this.store.get('embeds', id));
      if (!r || r.message_id) continue;
      r.message_id = messageId;
      await this.store.put('embeds', r);
      const view = key && !this.embeds.has(id) && (await this.openEmbed(r, key));
      if (view) this.emit('embed', { embed: view });
    }
  }

  /** A stored embed with its keys (sync, request_embed). @param {any} e @param {any[]} keys */
  async mergeEmbed(e, keys) {
    const hashed = await sha256Hex(e.embed_id);
    const k = keys.find((k) => k.hashed_embed_id === hashed && k.key_type === 'chat');
    const chat = await this.chatOfHashed(e.hashed_chat_id ?? k?.hashed_chat_id);
    if (!k || !chat || !e.encrypted_type) return;
    /** @type {EmbedRecord|undefined} */
    const had = await this.store.get('embeds', e.embed_id);
    // The answer it belongs to, by its hashed id (a device that did not see it live).
    let messageId = had?.message_id;
    if (!messageId && e.hashed_message_id) {
      for (const m of /** @type {MessageRecord[]} */ (await this.store.byChat('messages', chat))) {
        if ((await sha256Hex(m.message_id)) === e.hashed_message_id) messageId = m.message_id;
      }
      // Not here yet: placed when the answer comes (mergeMessage).
      if (!messageId) this.waitingEmbeds.set(e.hashed_message_id, [...(this.waitingEmbeds.get(e.hashed_message_id) ?? []), e.embed_id]);
    }
    /** @type {EmbedRecord} */
    const record = {
      embed_id: e.embed_id, chat_id: chat, message_id: messageId, hashed_message_id: e.hashed_message_id, encrypted_type: e.encrypted_type, encrypted_content: e.encrypted_content,
      encrypted_embed_key: k.encrypted_embed_key, status: e.status, version_number: e.version_number,
      parent_embed_id: e.parent_embed_id, embed_ids: e.embed_ids,
    };
    await this.store.put('embeds', record);
    // Shown at once by a page that already shows the chat (a sync lands after its messages).
    const key = this.chatKeys.get(chat);
    const view = key && !this.embeds.has(e.embed_id) && (await this.openEmbed(record, key));
    if (view) this.emit('embed', { embed: view });
  }

  /** @param {string|undefined} hashed */
  async chatOfHashed(hashed) {
    if (!hashed) return null;
    for (const c of /** @type {ChatRecord[]} */ (await this.store.all('chats'))) {
      if ((await sha256Hex(c.chat_id)) === hashed) return c.chat_id;
    }
    return null;
  }

  /** Sync content: chats with their messages. @param {any[]} chats @param {any[]} embeds @param {any[]} keys */
  async mergeContent(chats, embeds, keys) {
    for (const c of chats) {
      if (c.versions) await this.editChat(c.chat_id, (r) => { r.versions = c.versions; r.stored = true; });
      for (const [i, m] of (c.messages ?? []).entries()) await this.mergeMessage(c.chat_id, m, i);
    }
    for (const e of embeds ?? []) await this.mergeEmbed(e, keys ?? []);
    await this.emitChats();
  }

  /** Re-shows an answer that was streaming before a reload. @param {StreamRecord} s */
  async restoreStream(s) {
    if (this.answers.has(s.task_id)) return;
    let content = '';
    const key = this.chatKeys.get(s.chat_id);
    if (key && s.encrypted_content) {
      try {
        content = await unseal(key, s.encrypted_content, AAD.message(s.chat_id, s.task_id));
      } catch {
        content = '';
      }
    }
    // Without the text, ask for every frame.
    if (!content) s.sequence = 0;
    this.answers.set(s.task_id, {
      message_id: s.task_id, task_id: s.task_id, chat_id: s.chat_id, role: 'assistant', content,
      created_at: now(), at: s.at ?? Date.now(), state: 'streaming', sequence: s.sequence, user_message_id: s.user_message_id,
    });
    this.running.set(s.chat_id, s.task_id);
    this.emit('message', { message: { ...this.answers.get(s.task_id) } });
  }

  /**
   * An answer's text is final: kept encrypted here and, once per answer, stored on the
   * server (`ai_response_completed`; the server ignores a second copy).
   * @param {{chat_id: string, message_id: string, user_message_id?: string, content: string,
   *   model_name?: string, error_code?: string, interrupted?: boolean, links_repaired?: boolean,
   *   interrupted_by_shutdown?: boolean, role?: 'assistant'|'system', created_at?: number,
   *   replaces_through?: string}} a
   */
  async finishAnswer(a) {
    if (this.finished.has(a.message_id)) return;
    this.finished.add(a.message_id);
    const prior = this.answers.get(a.message_id);
    this.answers.delete(a.message_id);
    if (this.running.get(a.chat_id) === a.message_id) this.running.delete(a.chat_id);
    await this.store.delete('streams', a.message_id);
    const role = a.role ?? 'assistant';
    // The reasoning is kept only encrypted, with the answer.
    const thought = this.thinking.get(a.message_id);
    this.thinking.delete(a.message_id);
    this.emit('message', { message: {
      ...(prior ?? {}), message_id: a.message_id, task_id: a.message_id, chat_id: a.chat_id, role,
      content: a.content, created_at: prior?.created_at ?? a.created_at ?? now(), at: prior?.at ?? Date.now(), state: 'done', error_code: a.error_code,
      interrupted: a.interrupted, interrupted_by_shutdown: a.interrupted_by_shutdown,
      links_repaired: a.links_repaired || prior?.links_repaired, model_name: a.model_name,
      ...(thought ? { thinking: thought.content, thinking_done: true } : {}),
      ...(a.replaces_through ? { replaces_through: a.replaces_through } : {}),
    } });
    this.emit('task', { chat_id: a.chat_id, task_id: a.message_id, state: 'done' });
    const key = this.chatKeys.get(a.chat_id);
    if (!key || !a.content) return this.emitChats();
    const encrypted = await seal(key, a.content, AAD.message(a.chat_id, a.message_id));
    const existing = await this.store.get('messages', a.message_id);
    if (!existing) {
      const createdAt = a.created_at ?? now();
      /** @type {any} */
      const message = { message_id: a.message_id, role, encrypted_content: encrypted, created_at: createdAt };
      if (a.user_message_id) message.user_message_id = a.user_message_id;
      if (a.replaces_through) message.replaces_through = a.replaces_through;
      if (a.model_name) message.encrypted_model_name = await seal(key, a.model_name, AAD.message(a.chat_id, `${a.message_id}/model`));
      if (thought?.content) {
        message.encrypted_thinking_content = await seal(key, thought.content, AAD.thinking(a.chat_id, a.message_id));
        message.has_thinking = true;
      }
      await this.store.put('messages', /** @type {MessageRecord} */ ({ ...message, chat_id: a.chat_id, at: prior?.at ?? Date.now(), stored: false }));
      this.send({ type: 'ai_response_completed', payload: { chat_id: a.chat_id, message } });
    }
    await this.emitChats();
  }

  /** Re-sends a message with the chat's history from IndexedDB. @param {any} p request_chat_history */
  async answerHistoryRequest(p) {
    const chatId = p.chat_id;
    const all = await this.messages(chatId);
    const done = all.filter((m) => m.state === 'done');
    // The message the server could not answer: the newest user message.
    const latest = [...done].reverse().find((m) => m.role === 'user');
    if (!latest) return this.fail('invalid_chat_history', 'the server asked for a history this device does not have', { chat_id: chatId });
    // A compressed message goes along wherever its time puts it (it may be written after a
    // newer user message): the server places it by its `replaces_through`.
    const history = done
      .filter((m) => m.message_id !== latest.message_id && (m.created_at <= latest.created_at || m.replaces_through) && m.content)
      .map((m) => ({ message_id: m.message_id, role: m.role, content: m.content, created_at: m.created_at,
        ...(m.replaces_through ? { replaces_through: m.replaces_through } : {}) }));
    const embeds = (await this.chatEmbeds(chatId))
      .filter((e) => e.type && e.content && ['finished', 'error', 'cancelled'].includes(e.status))
      .map((e) => ({ embed_id: e.embed_id, type: e.type, content: e.content, status: e.status }));
    this.sendAdded(chatId, latest.message_id, latest.content, latest.created_at, history, embeds);
    this.emit('history_resent', { chat_id: chatId, message_id: latest.message_id, messages: history.length });
  }

  /** Encrypts a finished embed, stores it on the server and here. @param {EmbedView} e */
  async storeEmbed(e) {
    const chatKey = this.chatKeys.get(e.chat_id);
    if (!chatKey || e.type == null || e.content == null) return;
    const key = await generateKey();
    const record = /** @type {EmbedRecord} */ ({
      embed_id: e.embed_id, chat_id: e.chat_id, message_id: e.message_id, status: e.status,
      encrypted_type: await seal(key, e.type, AAD.embed(e.embed_id, 'type')),
      encrypted_content: await seal(key, e.content, AAD.embed(e.embed_id, 'content')),
      encrypted_embed_key: await wrap(chatKey, key, AAD.embedKey(e.embed_id)),
      parent_embed_id: e.parent_embed_id, embed_ids: e.embed_ids, skill_task_id: e.skill_task_id,
    });
    await this.store.put('embeds', record);
    const hashedChat = await sha256Hex(e.chat_id);
    /** @type {any} */
    const payload = {
      embed_id: e.embed_id, encrypted_type: record.encrypted_type, encrypted_content: record.encrypted_content,
      status: e.status, hashed_chat_id: hashedChat, version_number: 1,
    };
    if (e.embed_ids?.length) payload.embed_ids = e.embed_ids;
    if (e.parent_embed_id) payload.parent_embed_id = e.parent_embed_id;
    if (e.message_id) payload.hashed_message_id = await sha256Hex(e.message_id);
    // With its keys in one frame: every device that saw the result stores its own copy, and
    // the server keeps the first copy whole (a body with another copy's keys would not open).
    payload.embed_keys = [
      { hashed_embed_id: await sha256Hex(e.embed_id), key_type: 'chat', hashed_chat_id: hashedChat, encrypted_embed_key: record.encrypted_embed_key, created_at: now() },
      { hashed_embed_id: await sha256Hex(e.embed_id), key_type: 'master', encrypted_embed_key: await wrap(this.options.masterKey, key, AAD.embedKey(e.embed_id)), created_at: now() },
    ];
    // Kept (ciphertext and hashed ids only) until the server says it stored the embed: a
    // socket that was not open drops the frame, and `resendAnswers` sends it again.
    record.unstored = { embed: payload };
    await this.store.put('embeds', record);
    this.send({ type: 'store_embed', payload });
  }
}

/** How an answer that ended early is explained (`error_code` of its final frame). */
const ENDINGS = /** @type {Record<string, string>} */ ({
  node_lost: 'the server running this answer stopped; the chat goes on',
  answer_too_long: 'the answer reached its length limit',
  turn_deadline: 'the answer took too long and was ended',
});

/** @type {Record<string, (this: ChatdClient, p: any) => any>} */
const HANDLERS = {
  pong() {},
  active_chat_set_ack() {},
  token_refreshed() {},

  async chat_message_confirmed(p) {
    const key = this.chatKeys.get(p.chat_id);
    /** @type {MessageRecord|undefined} */
    const m = await this.store.get('messages', p.message_id);
    await this.editChat(p.chat_id, (c) => {
      c.versions = { ...(c.versions ?? {}), messages_v: p.new_messages_v, last_edited_overall_timestamp: p.new_last_edited_overall_timestamp };
    });
    // Only the device that wrote the message stores it: it has the ciphertext.
    const mine = this.sending.get(p.message_id);
    if (!mine) return;
    this.sending.delete(p.message_id);
    // Not sent again by a later page (a message confirmed long ago may be unknown to the server's cache).
    if (m) await this.store.put('messages', { ...m, confirmed: true });
    this.emit('message', { message: {
      message_id: p.message_id, chat_id: p.chat_id, role: 'user', content: mine.content, created_at: mine.created_at,
      at: mine.at, state: 'done', pending: false,
    } });
    if (!key || !m || m.stored) return;
    const chat = /** @type {ChatRecord} */ (await this.store.get('chats', p.chat_id));
    this.send({ type: 'encrypted_chat_metadata', payload: {
      chat_id: p.chat_id, message_id: p.message_id, encrypted_content: m.encrypted_content, created_at: m.created_at,
      encrypted_chat_key: chat.encrypted_chat_key, versions: { messages_v: p.new_messages_v },
    } });
  },

  async encrypted_metadata_stored(p) {
    await this.editChat(p.chat_id, (c) => { c.stored = true; c.versions = p.versions; });
    if (p.message_id) {
      const m = await this.store.get('messages', p.message_id);
      if (m) await this.store.put('messages', { ...m, stored: true });
    }
  },

  async new_chat_message(p) {
    const message = { message_id: p.message_id, chat_id: p.chat_id, role: p.role, content: p.content, created_at: p.created_at, at: Date.now(), state: /** @type {const} */ ('done') };
    if (!(await this.store.get('messages', p.message_id))) this.unstored.set(p.message_id, message);
    this.emit('message', { message });
    await this.emitChats();
  },

  ai_task_initiated(p) {
    this.running.set(p.chat_id, p.ai_task_id);
    this.emit('task', { chat_id: p.chat_id, task_id: p.ai_task_id, state: 'started' });
    this.emitChats();
  },

  message_queued(p) {
    this.emit('task', { chat_id: p.chat_id, task_id: p.active_task_id, state: 'queued', user_message_id: p.user_message_id, message: p.message });
  },

  async thinking_chunk(p) {
    const t = this.thinking.get(p.task_id) ?? { content: '', done: false, sequence: 0 };
    if (p.sequence <= (t.sequence ?? 0)) return;
    t.sequence = p.sequence;
    t.content += p.content;
    this.thinking.set(p.task_id, t);
    this.emitThinking(p, t);
  },

  thinking_complete(p) {
    const t = this.thinking.get(p.task_id) ?? { content: '', done: true };
    t.done = true;
    this.thinking.set(p.task_id, t);
    this.emitThinking(p, t);
  },

  routine_started(p) {
    this.routine(p, (r) => { r.routine = p.routine; r.state = 'running'; });
  },

  routine_status(p) {
    this.routine(p, (r) => { r.status = p.text; });
  },

  async routine_message(p) {
    this.routine(p, () => {});
    await this.finishAnswer({ chat_id: p.chat_id, message_id: p.message_id, content: p.text });
  },

  routine_information(p) {
    this.routine(p, (r) => { r.information.push(p.text); });
  },

  routine_error(p) {
    this.routine(p, (r) => { r.errors.push(p.code ? `${p.message} (${p.code})` : p.message); });
  },

  awaiting_user_input(p) {
    this.routine(p, (r) => { r.state = 'waiting'; r.question = p.question; });
  },

  routine_finished(p) {
    this.routine(p, (r) => { r.state = 'finished'; r.outcome = p.outcome; r.question = undefined; });
  },

  async request_app_settings_memories(p) {
    this.settingsRequests.set(p.request_id, p);
    this.emit('settings_request', { request: p });
    // The request is a message of the chat, stored (encrypted) like every message.
    const m = p.system_message;
    if (m?.content) await this.finishAnswer({ chat_id: p.chat_id, message_id: m.message_id, content: m.content, role: 'system', created_at: m.created_at });
  },

  dismiss_app_settings_memories_dialog(p) {
    this.settingsRequests.delete(p.request_id);
    this.emit('settings_dismissed', { chat_id: p.chat_id, request_id: p.request_id, reason: p.reason });
  },

  app_settings_memories_proposal(p) {
    this.proposals.set(p.proposal_id, p);
    this.emit('proposal', { proposal: p });
  },

  settings_memory_suggestion_rejected(p) {
    this.emit('suggestion_rejected', { chat_id: p.chat_id, hash: p.hash });
  },

  ai_task_waiting(p) {
    this.emit('task', { chat_id: p.chat_id, task_id: p.task_id, state: 'waiting', retry_after_ms: p.retry_after_ms });
  },

  async preprocessing_step(p) {
    this.emit('reasoning', { chat_id: p.chat_id, task_id: p.task_id, step: p.step, skipped: p.skipped, data: p.data });
    // The title comes before `ai_typing_started` (kept for it, which names the message), or
    // after the answer started, when the server did not wait for it.
    if (p.step === 'title_generated' && !p.skipped && p.data && p.data.title) {
      const title = { title: p.data.title, icon_names: p.data.icon_names, category: p.data.category };
      const a = this.answers.get(p.task_id);
      if (a) await this.storeTitle(p.chat_id, a.user_message_id, title.title, title.icon_names, title.category);
      else this.earlyTitles.set(p.task_id, title);
    }
  },

  async ai_typing_started(p) {
    const taskId = p.message_id;
    this.running.set(p.chat_id, taskId);
    if (!this.answers.has(taskId) && !this.finished.has(taskId)) {
      this.answers.set(taskId, {
        message_id: taskId, task_id: taskId, chat_id: p.chat_id, role: 'assistant', content: '', created_at: now(),
        at: Date.now(), state: 'streaming', sequence: 0, user_message_id: p.user_message_id, model_name: p.model_name,
      });
      await this.store.put('streams', /** @type {StreamRecord} */ ({ task_id: taskId, chat_id: p.chat_id, user_message_id: p.user_message_id, sequence: 0, at: Date.now() }));
      this.emit('message', { message: { ...this.answers.get(taskId), ...this.thoughtOf(taskId) } });
    }
    const early = this.earlyTitles.get(taskId);
    this.earlyTitles.delete(taskId);
    const t = p.title ? { title: p.title, icon_names: p.icon_names, category: p.category } : early;
    if (t) await this.storeTitle(p.chat_id, p.user_message_id, t.title, t.icon_names, t.category);
    await this.emitChats();
  },

  async ai_message_update(p) {
    const taskId = p.task_id;
    if (this.finished.has(taskId)) return;
    let a = this.answers.get(taskId);
    if (!a) {
      a = { message_id: taskId, task_id: taskId, chat_id: p.chat_id, role: 'assistant', content: '', created_at: now(),
        at: Date.now(), state: 'streaming', sequence: 0, user_message_id: p.user_message_id };
      this.answers.set(taskId, a);
      this.running.set(p.chat_id, taskId);
    }
    // Sequences only grow; an older frame (a replay overlapping the live ones) is dropped.
    if (p.sequence <= a.sequence) return;
    // The link-repair frame rewrites earlier text instead of extending it.
    const repaired = Boolean(a.content) && !p.full_content_so_far.startsWith(a.content);
    a.sequence = p.sequence;
    a.content = p.full_content_so_far;
    a.links_repaired = a.links_repaired || repaired || Boolean(p.replaced_links?.length);
    if (p.model_name) a.model_name = p.model_name;
    if (p.is_final_chunk) {
      if (p.error_code) this.fail(p.error_code, ENDINGS[p.error_code] ?? 'the answer ended early', { chat_id: p.chat_id, message_id: taskId });
      return this.finishAnswer({
        chat_id: p.chat_id, message_id: taskId, user_message_id: p.user_message_id, content: p.full_content_so_far,
        model_name: a.model_name, error_code: p.error_code, links_repaired: a.links_repaired,
        interrupted: Boolean(p.interrupted_by_revocation), interrupted_by_shutdown: Boolean(p.interrupted_by_shutdown),
      });
    }
    this.emit('message', { message: { ...a, ...this.thoughtOf(taskId) } });
    const key = this.chatKeys.get(p.chat_id);
    await this.store.put('streams', /** @type {StreamRecord} */ ({
      task_id: taskId, chat_id: p.chat_id, user_message_id: p.user_message_id, sequence: p.sequence, at: a.at,
      encrypted_content: key ? await seal(key, p.full_content_so_far, AAD.message(p.chat_id, taskId)) : undefined,
    }));
  },

  ai_background_response_completed(p) {
    return this.finishAnswer({
      chat_id: p.chat_id, message_id: p.message_id, user_message_id: p.user_message_id, content: p.full_content,
      model_name: p.model_name, error_code: p.error_code, interrupted: p.interrupted_by_revocation,
    });
  },

  pending_ai_response(p) {
    return this.finishAnswer({ chat_id: p.chat_id, message_id: p.message_id, user_message_id: p.user_message_id, content: p.content, model_name: p.model_name });
  },

  async ai_task_resumed(p) {
    if (p.recovered) return;
    // The log is gone: the stored answer comes with the next sync.
    await this.store.delete('streams', p.task_id);
    this.answers.delete(p.task_id);
    if (this.running.get(p.chat_id) === p.task_id) this.running.delete(p.chat_id);
    this.emit('task', { chat_id: p.chat_id, task_id: p.task_id, state: 'done' });
    await this.sync();
  },

  ai_task_cancel_requested() {},

  async post_processing_completed(p) {
    const settings = await Promise.all((p.suggested_settings_memories ?? []).map(async (/** @type {any} */ s) => ({ ...s, hash: await suggestionHash(s) })));
    this.emit('suggestions', { chat_id: p.chat_id, follow_ups: p.follow_up_request_suggestions ?? [], new_chat: p.new_chat_request_suggestions ?? [], settings_memories: settings });
    const key = this.chatKeys.get(p.chat_id);
    const task = /** @type {MessageRecord|undefined} */ (await this.store.get('messages', p.task_id));
    if (!key || !task) return;
    const enc = (/** @type {string} */ field, /** @type {any} */ v) => seal(key, JSON.stringify(v), AAD.chat(p.chat_id, field));
    /** @type {any} */
    const payload = {
      chat_id: p.chat_id,
      encrypted_follow_up_suggestions: await enc('follow_ups', p.follow_up_request_suggestions ?? []),
      encrypted_chat_summary: await enc('summary', p.chat_summary ?? ''),
      encrypted_chat_tags: await enc('tags', p.chat_tags ?? []),
    };
    if (p.updated_chat_title) {
      payload.encrypted_title = await seal(key, p.updated_chat_title, AAD.chat(p.chat_id, 'title'));
      this.titles.set(p.chat_id, p.updated_chat_title);
    }
    await this.editChat(p.chat_id, (c) => Object.assign(c, payload));
    this.send({ type: 'update_post_processing_metadata', payload });
    await this.emitChats();
  },

  async post_processing_metadata_stored(p) {
    await this.mergeChat(p.chat);
  },

  async chat_metadata_updated(p) {
    await this.mergeChat(p.chat);
    await this.emitChats();
  },

  async encrypted_chat_metadata(p) {
    await this.mergeChat(p.chat);
    if (p.message) await this.mergeMessage(p.chat_id, p.message);
    await this.emitChats();
  },

  async new_encrypted_message(p) {
    await this.editChat(p.chat_id, (c) => { if (p.versions) c.versions = p.versions; c.stored = true; });
    if (this.finished.has(p.message.message_id)) {
      const mine = await this.store.get('messages', p.message.message_id);
      if (mine) return;
    }
    await this.mergeMessage(p.chat_id, p.message);
  },

  async ai_response_storage_confirmed(p) {
    const m = await this.store.get('messages', p.message_id);
    if (m) await this.store.put('messages', { ...m, stored: true });
    await this.editChat(p.chat_id, (c) => { if (p.versions) c.versions = p.versions; c.stored = true; });
  },

  async chat_title_updated(p) {
    await this.editChat(p.chat_id, (c) => { c.encrypted_title = p.encrypted_title; if (p.versions) c.versions = p.versions; });
    this.titles.delete(p.chat_id);
    await this.openChatRecord(/** @type {ChatRecord} */ (await this.store.get('chats', p.chat_id)));
    await this.emitChats();
  },

  async chat_deleted(p) {
    await this.store.deleteChat(p.chat_id);
    this.chatKeys.delete(p.chat_id);
    this.titles.delete(p.chat_id);
    await this.emitChats();
  },

  async message_deleted(p) {
    await this.store.delete('messages', p.message_id);
    await this.emitChats();
  },

  request_chat_history(p) {
    return this.answerHistoryRequest(p);
  },

  /** The server summarised the chat's oldest messages: a system message of the chat, stored and re-sent with its mark. */
  history_compressed(p) {
    return this.finishAnswer({ chat_id: p.chat_id, message_id: p.message_id, content: p.content, role: 'system', created_at: p.created_at, replaces_through: p.replaces_through });
  },

  async send_embed_data(p) {
    if (p.already_encrypted) {
      if (p.embed) await this.mergeEmbed(p.embed, p.embed_keys ?? []);
      return;
    }
    /** @type {EmbedView} */
    const e = {
      embed_id: p.embed_id, chat_id: p.chat_id, message_id: p.message_id, type: p.type, content: p.content, status: p.status,
      skill_task_id: p.skill_task_id ?? this.embeds.get(p.embed_id)?.skill_task_id,
      app_id: p.app_id ?? skillOf(p.content).app_id, skill_id: p.skill_id ?? skillOf(p.content).skill_id,
      parent_embed_id: p.parent_embed_id, embed_ids: p.embed_ids, injection_flagged: p.injection_flagged,
    };
    this.embeds.set(e.embed_id, e);
    this.emit('embed', { embed: e });
    if (['finished', 'error', 'cancelled'].includes(e.status)) await this.storeEmbed(e);
  },

  skill_execution_status(p) {
    const embedId = p.preview_data?.embed_id;
    const e = embedId && this.embeds.get(embedId);
    if (e) {
      let changed = e.skill_task_id !== p.skill_task_id;
      e.skill_task_id = p.skill_task_id;
      // The status frame may come before the embed's own final frame.
      if (e.status !== p.status && ['processing', 'waiting'].includes(e.status)) {
        e.status = p.status;
        changed = true;
      }
      if (changed) this.emit('embed', { embed: e });
    }
    this.emit('skill', { chat_id: p.chat_id, task_id: p.task_id, skill_task_id: p.skill_task_id, embed_id: embedId, status: p.status, app_id: p.app_id, skill_id: p.skill_id, error: p.error });
  },

  skill_cancel_requested() {},

  focus_mode_activated(p) {
    this.focus.set(p.chat_id, p.focus_id);
    this.emit('focus', { chat_id: p.chat_id, focus_id: p.focus_id, active: true });
  },

  focus_mode_deactivated(p) {
    this.focus.delete(p.chat_id);
    this.emit('focus', { chat_id: p.chat_id, focus_id: p.focus_id, active: false });
  },

  app_preferences_set(p) {
    this.emit('app_preferences', { disabled_apps: p.disabled_apps, disabled_skills: p.disabled_skills });
  },
  /** The server stored an embed this device sent: nothing left to send again. @param {any} p */
  async embed_stored(p) {
    const r = await this.store.get('embeds', p.embed_id);
    if (r?.unstored) {
      delete r.unstored;
      await this.store.put('embeds', r);
    }
  },
  embed_update() {},
  embed_keys_stored() {},

  async phase_1_last_chat_ready(p) {
    if (p.chat_details) await this.mergeChat(p.chat_details);
    this.emit('sync', { phase: 'phase1' });
    await this.emitChats();
  },

  async phase_1b_chat_content_ready(p) {
    await this.mergeContent(p.chats ?? [], p.embeds, p.embed_keys);
    this.emit('sync', { phase: 'phase1b' });
  },

  async phase_2_last_20_chats_ready(p) {
    for (const c of p.chats ?? []) await this.mergeChat(c);
    this.emit('sync', { phase: 'phase2' });
    await this.emitChats();
  },

  async background_message_sync(p) {
    await this.mergeContent(p.chats ?? [], p.embeds, p.embed_keys);
    this.emit('sync', { phase: 'phase3', batch: p.batch_number });
  },

  async phased_sync_complete(p) {
    this.emit('sync', { phase: 'complete', requested: p.phase });
    await this.resendEarlier();
    await this.resendAnswers();
  },

  server_shutting_down(p) {
    this.emit('connection', { state: 'restarting', grace_ms: p.grace_ms, message: p.message });
  },

  error(p) {
    this.fail(p.code, p.message, { chat_id: p.chat_id, message_id: p.message_id, details: p.details });
  },
};
