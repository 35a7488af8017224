// @ts-check
/**
 * The demo page's sign-in form and its ways in, as `GET /v1/auth/config` offers them: the
 * development sign-in (a user name), the server's OpenID Connect provider (the authorization
 * code flow with PKCE, as a public client: no secret here; the ID token is the session
 * token), and a token pasted from `chatd token`. Then the passphrase derives the master key
 * here and goes nowhere; a wrong one is refused before anything is written. Only the
 * provider's own pages see a password.
 */

import { checkMasterKey, deriveMasterKey, rememberMasterKey, verifyMasterKey } from '/chatd-client.js';

/**
 * @typedef {{issuer: string, client_id: string, scopes: string, user_claim: string}} Provider
 * @typedef {{dev_login: boolean, oidc: Provider|null}} Ways
 * @typedef {{user: string, token: string, refresh?: string}} Identity
 */

const PENDING = 'chatd-demo-oidc';
/** Who is signed in on this tab and how: `{user, token, refresh?, via}`. */
export const SESSION = 'chatd-demo-session';

/** @param {string} sel @returns {any} */
const $ = (sel) => document.querySelector(sel);

/**
 * @typedef {{user: string, token: string, refresh?: string, via: string}} Session
 * @typedef {(who: Session, key: CryptoKey) => Promise<void>} Enter
 */

/** The ways in this server offers (from /v1/auth/config). @type {Ways} */
let offered = { dev_login: false, oidc: null };
/** Who the provider said the user is, back from its sign-in; the passphrase is still to come. @type {Identity|null} */
let arrived = null;

/**
 * Enters at once with this tab's session, or shows the form (after a return from the
 * provider, its passphrase step).
 * @param {{who: Session, key: CryptoKey}|null} saved @param {Enter} enter
 */
export async function showSignIn(saved, enter) {
  offered = await ways();
  if (saved) return enter(saved.who, saved.key);
  $('#login-form').addEventListener('submit', (/** @type {Event} */ e) => signIn(e, enter));
  $('#login-oidc').addEventListener('click', () => offered.oidc && leaveForProvider(offered.oidc).catch(
    (err) => showError(`The provider cannot be reached: ${err instanceof Error ? err.message : err}`)));
  $('#login').hidden = false;
  try {
    arrived = await returnFromProvider(offered.oidc);
  } catch (err) {
    showError(`Sign-in with ${offered.oidc ? providerName(offered.oidc) : 'the provider'} failed: ${err instanceof Error ? err.message : err}`);
  }
  showWays();
}

/** What the server offers (nothing but a pasted token when it cannot say). @returns {Promise<Ways>} */
export async function ways() {
  try {
    const res = await fetch('/v1/auth/config');
    if (res.ok) return await res.json();
  } catch { /* offline: a pasted token still works once the server is back */ }
  return { dev_login: false, oidc: null };
}

/** The provider's host, for the button. @param {Provider} p */
export function providerName(p) {
  try {
    return new URL(p.issuer).host;
  } catch {
    return p.issuer;
  }
}

/** Shows the parts of the sign-in form that fit what the server offers. */
function showWays() {
  const provider = offered.oidc;
  const show = (/** @type {string} */ id, /** @type {boolean} */ on) => { $(id).hidden = !on; };
  show('#login-oidc', !!provider && !arrived);
  if (provider) $('#login-oidc').textContent = `Sign in with ${providerName(provider)}`;
  show('#login-who', !!arrived);
  if (arrived) $('#login-who').textContent = `Signed in at ${providerName(/** @type {any} */ (provider))} as ${arrived.user}.`;
  show('#login-user-part', !arrived && offered.dev_login);
  show('#login-token-part', !arrived && !offered.dev_login);
  show('#login-passphrase-part', true);
  show('#login-submit', true);
  $('#login-hint').textContent = arrived
    ? 'Your passphrase opens your chats in this browser; it is never sent anywhere.'
    : offered.dev_login
      ? 'Development sign-in: any user name gets a session token. The passphrase derives your encryption key in this browser and is never sent anywhere.'
      : `${provider ? `Sign in with ${providerName(provider)}, or paste` : 'Paste'} a session token: on the server, run \`chatd token --user <name>\` and paste what it prints. The passphrase derives your encryption key in this browser and is never sent anywhere.`;
  $('[data-testid=login-user]').required = !arrived && offered.dev_login;
  $('[data-testid=login-token]').required = !arrived && !offered.dev_login;
  $('[data-testid=login-passphrase]').required = true;
}

/** @param {string} text */
function showError(text) {
  $('#login-status').textContent = '';
  const error = $('[data-testid=login-error]');
  error.textContent = text;
  error.hidden = false;
}

/** @param {Event} e @param {Enter} enter */
async function signIn(e, enter) {
  e.preventDefault();
  const passphrase = $('[data-testid=login-passphrase]').value;
  const status = $('#login-status');
  $('[data-testid=login-error]').hidden = true;
  /** @type {{user: string, token?: string, refresh?: string, via: string}} */
  let who;
  if (arrived) who = { ...arrived, via: 'oidc' };
  else if (offered.dev_login) who = { user: $('[data-testid=login-user]').value.trim(), via: 'dev' };
  else {
    const token = $('[data-testid=login-token]').value.trim();
    const user = pastedUser(token, offered);
    if (!user) return showError('That is not a session token: paste all that `chatd token --user <name>` printed.');
    who = { user, token, via: 'token' };
  }
  status.textContent = 'Deriving your key…';
  const key = await deriveMasterKey(who.user, passphrase);
  // Another passphrase than this browser knows for the user: refused before anything is written.
  if (!(await checkMasterKey(who.user, key))) {
    return showError('Wrong passphrase: it does not open this user\'s data in this browser.');
  }
  if (who.via === 'dev') {
    status.textContent = 'Signing in…';
    const res = await mint(who.user);
    if (!res.ok) {
      return showError(res.status === 404
        ? 'This server has no development sign-in ([web] dev_login).'
        : `Sign-in refused: ${await res.text()}`);
    }
    who.token = (await res.json()).token;
  }
  // The server keeps the user's check value: a passphrase this browser has not seen is
  // checked there, before anything is written.
  status.textContent = 'Checking your passphrase…';
  const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/v1/ws`;
  try {
    if (!(await verifyMasterKey({ url, token: /** @type {string} */ (who.token), userId: who.user, masterKey: key }))) {
      return showError('Wrong passphrase: it does not open this user\'s data.');
    }
  } catch (err) {
    return showError(`The server could not check the passphrase: ${err instanceof Error ? err.message : err}`);
  }
  $('[data-testid=login-passphrase]').value = '';
  $('[data-testid=login-token]').value = '';
  await rememberMasterKey(who.user, key);
  sessionStorage.setItem(SESSION, JSON.stringify(who));
  status.textContent = '';
  arrived = null;
  await enter(/** @type {Session} */ (who), key);
}

/** A development token for `user`: only the user name leaves the page; the token comes back in the body. @param {string} user */
function mint(user) {
  return fetch('/v1/dev/token', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ user }),
  });
}

/**
 * A fresh token when the session's expires: a new development sign-in, the provider's
 * refresh token, or nothing (a pasted token or a provider without refresh: sign in again).
 * @param {Session} who
 */
export async function fresh(who) {
  if (who.via === 'dev') {
    const res = await mint(who.user);
    if (!res.ok) throw new Error(`sign-in refused: ${res.status}`);
    who.token = (await res.json()).token;
  } else if (who.via === 'oidc' && who.refresh && offered.oidc) {
    const next = await refreshWithProvider(offered.oidc, who.refresh);
    if (next.user !== who.user) throw new Error('the provider names another user');
    Object.assign(who, next);
  } else {
    throw new Error('the session token expired: sign in again');
  }
  sessionStorage.setItem(SESSION, JSON.stringify(who));
  return who.token;
}

/** Random bytes as base64url. @param {number} n */
function random(n) {
  return b64url(crypto.getRandomValues(new Uint8Array(n)));
}

/** @param {Uint8Array} bytes */
function b64url(bytes) {
  let s = '';
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/** The provider's endpoints, from its discovery document. @param {Provider} p */
async function discover(p) {
  const res = await fetch(`${p.issuer.replace(/\/$/, '')}/.well-known/openid-configuration`);
  if (!res.ok) throw new Error(`the provider's discovery document answered ${res.status}`);
  const doc = await res.json();
  if (typeof doc.authorization_endpoint !== 'string' || typeof doc.token_endpoint !== 'string') {
    throw new Error('the provider names no authorization or token endpoint');
  }
  return { authorize: doc.authorization_endpoint, token: doc.token_endpoint };
}

/** This page, as the provider sends the browser back to it. */
const redirectUri = () => `${location.origin}/`;

/** Leaves for the provider's sign-in; it sends the browser back with a code. @param {Provider} p */
export async function leaveForProvider(p) {
  const { authorize } = await discover(p);
  const verifier = random(32);
  const state = random(16);
  const nonce = random(16);
  const challenge = b64url(new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier))));
  sessionStorage.setItem(PENDING, JSON.stringify({ verifier, state, nonce }));
  const url = new URL(authorize);
  for (const [k, v] of Object.entries({
    response_type: 'code', client_id: p.client_id, redirect_uri: redirectUri(), scope: p.scopes,
    state, nonce, code_challenge: challenge, code_challenge_method: 'S256',
  })) url.searchParams.set(k, v);
  location.assign(url.toString());
}

/**
 * Back from the provider: the code exchanged (with the PKCE verifier) for the ID token, its
 * nonce, issuer and audience checked (chatd checks its signature). `null` when this load
 * is no such return. Throws with what went wrong.
 * @param {Provider|null} p @returns {Promise<Identity|null>}
 */
export async function returnFromProvider(p) {
  const params = new URLSearchParams(location.search);
  if (!params.has('code') && !params.has('error')) return null;
  const pending = JSON.parse(sessionStorage.getItem(PENDING) ?? 'null');
  sessionStorage.removeItem(PENDING);
  history.replaceState(null, '', location.pathname);
  if (params.has('error')) throw new Error(`the provider refused: ${params.get('error_description') ?? params.get('error')}`);
  if (!p || !pending || params.get('state') !== pending.state) throw new Error('this sign-in was not started here; start again');
  const { token: endpoint } = await discover(p);
  const res = await fetch(endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({
      grant_type: 'authorization_code', code: params.get('code') ?? '', redirect_uri: redirectUri(),
      client_id: p.client_id, code_verifier: pending.verifier,
    }),
  });
  const body = await res.json().catch(() => ({}));
  if (!res.ok || typeof body.id_token !== 'string') throw new Error(`the provider gave no ID token (${body.error ?? res.status})`);
  const claims = tokenClaims(body.id_token);
  const aud = [claims?.aud].flat();
  if (!claims || claims.nonce !== pending.nonce || claims.iss !== p.issuer || !aud.includes(p.client_id)) {
    throw new Error('the ID token is not for this sign-in');
  }
  const user = claims[p.user_claim];
  if (typeof user !== 'string' || !user) throw new Error(`the ID token has no ${p.user_claim}`);
  return { user, token: body.id_token, refresh: typeof body.refresh_token === 'string' ? body.refresh_token : undefined };
}

/** A fresh ID token with the provider's refresh token. @param {Provider} p @param {string} refresh @returns {Promise<Identity>} */
export async function refreshWithProvider(p, refresh) {
  const { token: endpoint } = await discover(p);
  const res = await fetch(endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: refresh, client_id: p.client_id }),
  });
  const body = await res.json().catch(() => ({}));
  if (!res.ok || typeof body.id_token !== 'string') throw new Error('sign in again');
  const user = tokenClaims(body.id_token)?.[p.user_claim];
  return { user, token: body.id_token, refresh: body.refresh_token ?? refresh };
}

/** A JWT's claims (unverified: chatd verifies), or null. @param {string} token @returns {any} */
export function tokenClaims(token) {
  try {
    const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    const bytes = Uint8Array.from(atob(part + '='.repeat((4 - (part.length % 4)) % 4)), (c) => c.charCodeAt(0));
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    return null;
  }
}

/**
 * The user a pasted token names: `sub` for chatd's own (HS256) tokens, the provider's user
 * claim for its tokens; null when it is no token.
 * @param {string} token @param {Ways} w
 */
export function pastedUser(token, w) {
  const claims = tokenClaims(token);
  let alg = '';
  try {
    alg = JSON.parse(atob(token.split('.')[0].replace(/-/g, '+').replace(/_/g, '/'))).alg;
  } catch { return null; }
  const claim = alg === 'HS256' ? 'sub' : (w.oidc?.user_claim ?? 'sub');
  const user = claims?.[claim];
  return typeof user === 'string' && user ? user : null;
}
