// @ts-check
/**
 * Part of chatd-client.js (see README.md): the client's one WebSocket to chatd: connect with
 * the token, ping, reconnect with backoff, frames handled one at a time and in order by the
 * handler tables of the other parts, and the events the client dispatches.
 */

import { newId } from './crypto.js';

/** @typedef {import('../chatd-client.js').ChatdClient} ChatdClient */

/**
 * @typedef {'connecting'|'open'|'reconnecting'|'closed'} ConnectionState
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

/** The socket and the events; {@link ChatdClient} is built on it. */
export class Connection extends EventTarget {
  /** @param {ClientOptions} options */
  constructor(options) {
    super();
    this.options = options;
    this.sessionId = options.sessionId ?? newId();
    /** @type {ConnectionState} */
    this.state = 'closed';
    /** @type {WebSocket|null} */
    this.ws = null;
    this.attempt = 0;
    this.stopped = false;
    /** @type {ReturnType<typeof setTimeout>|undefined} */
    this.timer = undefined;
    this.lastSeen = 0;
    /** @type {Promise<void>} frames are handled one at a time, in order */
    this.queue = Promise.resolve();
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
    this.closeLocal();
    this.setState('closed');
  }

  /** What else closes with the client (the local store). */
  closeLocal() {}

  /** @param {ConnectionState} state @param {number} [code] */
  setState(state, code) {
    this.state = state;
    this.emit('connection', { state, code });
  }

  /** The socket is open (what is sent then is the client's: ChatdClient.opened). */
  opened() {
    this.attempt = 0;
    this.lastSeen = Date.now();
    this.setState('open');
    this.schedulePing();
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

  /** The frames this part handles (the client's table has every part's). */
  get handlers() {
    return CONNECTION_HANDLERS;
  }
}

/** Frames about the connection itself. @type {Record<string, (this: ChatdClient, p: any) => any>} */
export const CONNECTION_HANDLERS = {
  pong() {},

  active_chat_set_ack() {},

  token_refreshed() {},

  server_shutting_down(p) {
    this.emit('connection', { state: 'restarting', grace_ms: p.grace_ms, message: p.message });
  },

  error(p) {
    if (p.message_id) this.starting.delete(p.message_id);
    this.fail(p.code, p.message, { chat_id: p.chat_id, message_id: p.message_id, details: p.details });
  },
};
