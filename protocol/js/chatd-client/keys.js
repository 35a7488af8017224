// @ts-check
/**
 * Part of chatd-client.js (see README.md): the user's master key: derived from a passphrase
 * or imported, remembered in IndexedDB (not extractable), and checked against the check
 * value the server keeps before anything is written.
 */

import { KEY_USAGES, seal, unseal } from './crypto.js';
import { LocalStore, done } from './store.js';

/** PBKDF2-SHA-256 iterations of {@link deriveMasterKey} (the least it accepts). */
export const PBKDF2_ITERATIONS = 600000;

const te = new TextEncoder();

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
