// @ts-check
/**
 * Part of chatd-client.js (see README.md): what a chat can do beside messages: skills and
 * their embeds (stored encrypted once finished), routines, focus modes, app preferences,
 * settings/memories requests, proposals and suggestions, and names marked private.
 */

import { AAD, generateKey, now, seal, sha256Hex, suggestionHash, wrap } from './crypto.js';
import { skillOf } from './local.js';
import { Answers } from './answers.js';

/**
 * @typedef {import('../chatd-client.js').ChatdClient} ChatdClient
 * @typedef {import('./store.js').EmbedRecord} EmbedRecord
 * @typedef {import('./local.js').EmbedView} EmbedView
 * @typedef {import('./local.js').RoutineView} RoutineView
 * @typedef {import('./connection.js').ClientOptions} ClientOptions
 * @typedef {import('./store.js').LocalStore} LocalStore
 */

/** The chat's capabilities, on answers. */
export class Capabilities extends Answers {
  /** @param {ClientOptions} options @param {LocalStore} store */
  constructor(options, store) {
    super(options, store);
    /** @type {Map<string, RoutineView>} run id -> routine run (shown, not stored) */
    this.routines = new Map();
    /** @type {Map<string, string>} chat id -> its active focus mode */
    this.focus = new Map();
    /** @type {Map<string, any>} request id -> an unanswered `request_app_settings_memories` */
    this.settingsRequests = new Map();
    /** @type {Map<string, any>} proposal id -> an undecided `app_settings_memories_proposal` */
    this.proposals = new Map();
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

  /** The chat's active focus mode (`app_id-focus_id`), if any. @param {string} chatId */
  focusOf(chatId) {
    return this.focus.get(chatId) ?? null;
  }

  /** Stops a routine run (`cancel_routine`); every device hears `routine` finished. @param {string} runId */
  cancelRoutine(runId) {
    this.send({ type: 'cancel_routine', payload: { run_id: runId } });
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

/** Frames of skills, embeds, routines, focus modes, preferences and settings/memories. @type {Record<string, (this: ChatdClient, p: any) => any>} */
export const CAPABILITY_HANDLERS = {
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
};
