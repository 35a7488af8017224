// @ts-check
/**
 * chatd-client.js: the reference browser client of chatd (see README.md beside it).
 *
 * It owns one WebSocket to chatd (ping, reconnect with backoff, `resume_ai_task` for answers
 * that were streaming), the user's end-to-end encryption (WebCrypto only: a master key from a
 * passphrase or imported, one AES-GCM key per chat wrapped by it), and the user's chats in
 * IndexedDB (ciphertext at rest), kept in step by phased sync and used to answer
 * `request_chat_history` on its own. A UI listens to the events it dispatches (see
 * {@link ChatdClient}).
 *
 * What the client asks the server to store is ciphertext made here; the only plaintext it
 * sends is what the protocol wants in the clear for the model: a new message's content, and
 * the history and embeds it re-sends when the server asks for them.
 *
 * Dependency-free ES modules, no build step: this one is the entry and exports the whole
 * API; the parts in chatd-client/ beside it (crypto, store, keys, connection, local, sync,
 * answers, capabilities) are imported from here, each building on the one before.
 */

import { AAD, generateKey, newId, now, seal, unwrap, wrap } from './chatd-client/crypto.js';
import { LocalStore } from './chatd-client/store.js';
import { CONNECTION_HANDLERS } from './chatd-client/connection.js';
import { SYNC_HANDLERS } from './chatd-client/sync.js';
import { ANSWER_HANDLERS } from './chatd-client/answers.js';
import { Capabilities, CAPABILITY_HANDLERS } from './chatd-client/capabilities.js';

export { newId, sha256Hex, suggestionHash } from './chatd-client/crypto.js';
export {
  PBKDF2_ITERATIONS, checkMasterKey, deriveMasterKey, forgetUser, importMasterKey, rememberMasterKey,
  rememberedMasterKey, verifyMasterKey,
} from './chatd-client/keys.js';
export { LocalStore } from './chatd-client/store.js';
export { skillOf } from './chatd-client/local.js';

/**
 * @typedef {import('./chatd-client/connection.js').ConnectionState} ConnectionState
 * @typedef {import('./chatd-client/connection.js').ClientOptions} ClientOptions
 * @typedef {import('./chatd-client/local.js').ChatSummary} ChatSummary
 * @typedef {import('./chatd-client/local.js').ChatMessage} ChatMessage
 * @typedef {import('./chatd-client/local.js').RoutineView} RoutineView
 * @typedef {import('./chatd-client/local.js').EmbedView} EmbedView
 * @typedef {import('./chatd-client/store.js').ChatRecord} ChatRecord
 * @typedef {import('./chatd-client/store.js').MessageRecord} MessageRecord
 * @typedef {import('./chatd-client/store.js').StreamRecord} StreamRecord
 */

/** Every frame the client handles, by type. */
const HANDLERS = { ...CONNECTION_HANDLERS, ...SYNC_HANDLERS, ...ANSWER_HANDLERS, ...CAPABILITY_HANDLERS };

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
export class ChatdClient extends Capabilities {
  /** @param {ClientOptions} options @param {LocalStore} store */
  constructor(options, store) {
    super(options, store);
    /** @type {string|null} */
    this.activeChat = null;
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

  async opened() {
    super.opened();
    if (this.activeChat) this.send({ type: 'set_active_chat', payload: { chat_id: this.activeChat } });
    // Messages sent while the socket was down, or not yet confirmed: sent (again). The server
    // answers a message id once, so a copy it already has only gets confirmed. (Those of an
    // earlier page join them after the sync: resendEarlier.) So do confirmed ones whose turn
    // this device never heard of (its node may have stopped right after confirming): the
    // server says where each stands (its turn, its place in the queue, or a confirmation
    // of one answered meanwhile); at most three times.
    for (const [id, m] of this.starting) {
      this.starting.delete(id);
      const tries = (m.tries ?? 0) + 1;
      if (tries <= 3) this.sending.set(id, { ...m, tries });
    }
    for (const id of this.sending.keys()) this.resend(id);
    // Answers that were streaming when the page or the socket went away.
    for (const s of /** @type {StreamRecord[]} */ (await this.store.all('streams'))) {
      if (this.finished.has(s.task_id)) continue;
      await this.restoreStream(s);
      this.send({ type: 'resume_ai_task', payload: { chat_id: s.chat_id, task_id: s.task_id, last_sequence: s.sequence } });
    }
    await this.sync();
  }

  // ---- what a UI calls (and, in the parts: markPrivate, cancelSkill, focus modes, app
  // preferences, routines, settings/memories, proposals and suggestions)

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
   * Answers a routine's question: the user's next message in the chat is the answer.
   * @param {string} chatId @param {string} text
   */
  answerRoutine(chatId, text) {
    return this.sendMessage(chatId, text);
  }

  /** Stops the answer running in `chatId`. @param {string} chatId */
  cancel(chatId) {
    const task = this.running.get(chatId);
    if (task) this.send({ type: 'cancel_ai_task', payload: { task_id: task, chat_id: chatId } });
  }

  /** Deletes a chat everywhere. @param {string} chatId */
  deleteChat(chatId) {
    this.send({ type: 'delete_chat', payload: { chat_id: chatId } });
  }

  get handlers() {
    return HANDLERS;
  }
}
