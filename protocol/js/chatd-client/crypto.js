// @ts-check
/**
 * Part of chatd-client.js (see README.md): encoding, ids and hashes, and the ciphertext the
 * client makes with WebCrypto only (AES-256-GCM bound to associated data, keys wrapped by
 * keys). Nothing here touches IndexedDB or the socket.
 */

const te = new TextEncoder();
const td = new TextDecoder();
/** First byte of every ciphertext this client makes: the format version. */
const FORMAT = 1;
/** Key usages of the master key and of chat keys (both wrap keys below them). */
export const KEY_USAGES = /** @type {KeyUsage[]} */ (['encrypt', 'decrypt', 'wrapKey', 'unwrapKey']);

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
export function now() {
  return Math.floor(Date.now() / 1000);
}

/** Where a message without a local time sorts (answers after the question of their second). @param {number} createdAt @param {string} role */
export function order(createdAt, role) {
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

/**
 * The hash `reject_settings_memory_suggestion` names a suggestion by: SHA-256 hex of
 * `app_id:item_type:` and the lower-cased title.
 * @param {{app_id: string, item_type: string, suggested_title: string}} s
 */
export function suggestionHash(s) {
  return sha256Hex(`${s.app_id}:${s.item_type}:${s.suggested_title.toLowerCase()}`);
}

// ---------------------------------------------------------------------------------------
// Ciphertext

/**
 * AES-GCM: base64 of `[1][12-byte IV][ciphertext+tag]`, bound to `aad`.
 * @param {CryptoKey} key @param {string} plaintext @param {string} aad
 */
export async function seal(key, plaintext, aad) {
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
export async function unseal(key, sealed, aad) {
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
export async function wrap(wrapping, key, aad) {
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
export async function unwrap(wrapping, wrapped, aad) {
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
export function generateKey() {
  return crypto.subtle.generateKey({ name: 'AES-GCM', length: 256 }, true, KEY_USAGES);
}

/** Associated data: what a ciphertext is, so one cannot stand in for another. */
export const AAD = {
  chatKey: (/** @type {string} */ chat) => `chatd/v1/chat-key/${chat}`,
  chat: (/** @type {string} */ chat, /** @type {string} */ field) => `chatd/v1/chat/${chat}/${field}`,
  message: (/** @type {string} */ chat, /** @type {string} */ id) => `chatd/v1/chat/${chat}/message/${id}`,
  thinking: (/** @type {string} */ chat, /** @type {string} */ id) => `chatd/v1/chat/${chat}/message/${id}/thinking`,
  embed: (/** @type {string} */ id, /** @type {string} */ field) => `chatd/v1/embed/${id}/${field}`,
  embedKey: (/** @type {string} */ id) => `chatd/v1/embed-key/${id}`,
};
