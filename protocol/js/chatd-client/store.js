// @ts-check
/**
 * Part of chatd-client.js (see README.md): the user's chats in IndexedDB, ciphertext at
 * rest (database `chatd:<user>`).
 */

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
export function done(req) {
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
