// @ts-check
/**
 * Part of chatd-client.js (see README.md): turns: answers streaming (resumed after a reload
 * or a reconnect), their reasoning, how they end (typed endings said for what they are), the
 * finished answer stored as ciphertext, and the history re-sent when the server asks for it.
 */

import { AAD, now, seal, unseal } from './crypto.js';
import { Synced } from './sync.js';

/**
 * @typedef {import('../chatd-client.js').ChatdClient} ChatdClient
 * @typedef {import('./store.js').MessageRecord} MessageRecord
 * @typedef {import('./store.js').StreamRecord} StreamRecord
 * @typedef {import('./connection.js').ClientOptions} ClientOptions
 * @typedef {import('./store.js').LocalStore} LocalStore
 */

/** Answers, on sync. */
export class Answers extends Synced {
  /** @param {ClientOptions} options @param {LocalStore} store */
  constructor(options, store) {
    super(options, store);
    /** @type {Map<string, {title: string, icon_names?: string[], category?: string}>} task id -> a title step before its typing frame */
    this.earlyTitles = new Map();
  }

  /** @param {any} p a thinking frame @param {{content: string, done: boolean}} t */
  emitThinking(p, t) {
    this.emit('thinking', { chat_id: p.chat_id, task_id: p.task_id, message_id: p.message_id ?? p.task_id, content: t.content, done: t.done });
    const a = this.answers.get(p.task_id);
    if (a) this.emit('message', { message: { ...a, ...this.thoughtOf(p.task_id) } });
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
    // Unconfirmed again until the re-send is: the server did not start its turn, and a server
    // that stops before taking the re-send leaves it to this device to send it again.
    this.sending.set(latest.message_id, { chat_id: chatId, content: latest.content, created_at: latest.created_at, at: latest.at ?? Date.now() });
    this.sendAdded(chatId, latest.message_id, latest.content, latest.created_at, history, embeds);
    this.emit('history_resent', { chat_id: chatId, message_id: latest.message_id, messages: history.length });
  }
}

/** How an answer that ended early is explained (`error_code` of its final frame). */
export const ENDINGS = /** @type {Record<string, string>} */ ({
  node_lost: 'the server running this answer stopped; the chat goes on',
  answer_too_long: 'the answer reached its length limit',
  turn_deadline: 'the answer took too long and was ended',
});

/** Frames of a turn. @type {Record<string, (this: ChatdClient, p: any) => any>} */
export const ANSWER_HANDLERS = {
  ai_task_initiated(p) {
    this.starting.delete(p.user_message_id);
    this.running.set(p.chat_id, p.ai_task_id);
    this.emit('task', { chat_id: p.chat_id, task_id: p.ai_task_id, state: 'started' });
    this.emitChats();
  },

  message_queued(p) {
    this.starting.delete(p.user_message_id);
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
    this.starting.delete(p.user_message_id);
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

  request_chat_history(p) {
    return this.answerHistoryRequest(p);
  },

  /** The server summarised the chat's oldest messages: a system message of the chat, stored and re-sent with its mark. */
  history_compressed(p) {
    return this.finishAnswer({ chat_id: p.chat_id, message_id: p.message_id, content: p.content, role: 'system', created_at: p.created_at, replaces_through: p.replaces_through });
  },
};
