// @ts-check
/**
 * Part of chatd-client.js (see README.md): keeping IndexedDB in step with the server:
 * phased sync, other devices' writes as they come, user messages (re)sent until confirmed,
 * and what this device wrote stored on the server as ciphertext.
 */

import { AAD, seal, sha256Hex, suggestionHash, unseal } from './crypto.js';
import { LocalState } from './local.js';

/**
 * @typedef {import('../chatd-client.js').ChatdClient} ChatdClient
 * @typedef {import('./store.js').ChatRecord} ChatRecord
 * @typedef {import('./store.js').MessageRecord} MessageRecord
 * @typedef {import('./store.js').EmbedRecord} EmbedRecord
 * @typedef {import('./store.js').Versions} Versions
 * @typedef {import('./connection.js').ClientOptions} ClientOptions
 * @typedef {import('./store.js').LocalStore} LocalStore
 */

/** Sync and sending, on the local state. */
export class Synced extends LocalState {
  /** @param {ClientOptions} options @param {LocalStore} store */
  constructor(options, store) {
    super(options, store);
    /** Names marked private per chat (`markPrivate`). @type {Map<string, string[]>} */
    this.privateNames = new Map();
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
}

/** Frames that keep IndexedDB in step. @type {Record<string, (this: ChatdClient, p: any) => any>} */
export const SYNC_HANDLERS = {
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
    this.starting.set(p.message_id, mine);
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
};
