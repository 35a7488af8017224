// @ts-check
/**
 * Part of chatd-client.js (see README.md): what this device has: the chats, messages and
 * embeds of its IndexedDB, decrypted for the UI, with the answers still streaming and the
 * messages not yet confirmed.
 */

import { AAD, now, order, sha256Hex, unseal, unwrap } from './crypto.js';
import { Connection } from './connection.js';

/**
 * @typedef {import('./connection.js').ClientOptions} ClientOptions
 * @typedef {import('./store.js').LocalStore} LocalStore
 * @typedef {import('./store.js').ChatRecord} ChatRecord
 * @typedef {import('./store.js').MessageRecord} MessageRecord
 * @typedef {import('./store.js').EmbedRecord} EmbedRecord
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
 */

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

/** The local state of the client, on its socket. */
export class LocalState extends Connection {
  /** @param {ClientOptions} options @param {LocalStore} store */
  constructor(options, store) {
    super(options);
    this.store = store;
    /** @type {Map<string, CryptoKey>} */
    this.chatKeys = new Map();
    /** @type {Map<string, string>} chat id -> plaintext title */
    this.titles = new Map();
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
    /** @type {Map<string, {content: string, done: boolean}>} task id -> reasoning so far (memory only) */
    this.thinking = new Map();
    /** @type {Map<string, {chat_id: string, content: string, created_at: number, at: number}>} user messages written here the server has not confirmed */
    this.sending = new Map();
    /** @type {Map<string, {chat_id: string, content: string, created_at: number, at: number, tries?: number}>} user messages written here, confirmed, whose turn this device has not heard of yet (no `ai_task_initiated`, `message_queued` or typing frame): sent again after a reconnect (their node may have stopped right after confirming) */
    this.starting = new Map();
    /** @type {Map<string, {chat_id: string, content: string, created_at: number, at: number}>} user messages an earlier page wrote and never saw confirmed: into `sending` after the first sync */
    this.earlier = new Map();
  }

  closeLocal() {
    this.store.db.close();
  }

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

  /** The reasoning of a running answer, for its `message` events. @param {string} taskId */
  thoughtOf(taskId) {
    const t = this.thinking.get(taskId);
    return t ? { thinking: t.content, thinking_done: t.done } : {};
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

  /** @param {string} chatId @param {(c: ChatRecord) => void} edit */
  async editChat(chatId, edit) {
    const c = /** @type {ChatRecord} */ ((await this.store.get('chats', chatId)) ?? { chat_id: chatId, updated_at: now() });
    edit(c);
    await this.store.put('chats', c);
    return c;
  }
}
