// The demo page in a real browser against a real chatd (run by tests/it/browser.rs, which
// starts redis-server, the fake LLM and chatd, and acts when this script prints `@need`).
// Every wait is on the page's DOM state; nothing sleeps.
//
// Env: CHATD_URL (the page), CHATD_SCREENSHOT (where the picture of the page goes).
import assert from 'node:assert/strict';
import { launch, need, signIn, stopInput, typed, watch } from './lib.mjs';

const base = process.env.CHATD_URL;
const screenshot = process.env.CHATD_SCREENSHOT;
assert.ok(base, 'CHATD_URL is not set');
const USER = 'alice';
const PASSPHRASE = 'a passphrase that never leaves the browser';
typed(PASSPHRASE);

/** @param {string} [state] */
const assistant = (state) => `[data-testid=message][data-role=assistant]${state ? `[data-state=${state}]` : ''}`;

/** Types a message into the page and sends it. */
async function say(page, text) {
  typed(text);
  await page.fill('[data-testid=chat-input]', text);
  await page.click('[data-testid=send]');
}

/** Waits until `selector` matches exactly `n` elements. */
async function count(page, selector, n) {
  try {
    await page.waitForFunction(([s, n]) => document.querySelectorAll(s).length === n, [selector, n]);
  } catch (e) {
    const seen = await page.evaluate((s) => [...document.querySelectorAll(s)].map((m) => m.textContent), selector);
    throw new Error(`${seen.length} (not ${n}) of ${selector}: ${JSON.stringify(seen)}\n${e.message}`);
  }
}

/** Waits for `promise` (an event), failing with `what` after `ms`. */
async function within(promise, ms, what) {
  let timer;
  const late = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${what} within ${ms} ms`)), ms); });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** @param {string} text @param {string} part */
function occurrences(text, part) {
  return text.split(part).length - 1;
}

const chrome = await launch();
try {
  const a = await (await chrome.newContext()).newPage();
  const b = await (await chrome.newContext()).newPage();
  a.setDefaultTimeout(30000);
  b.setDefaultTimeout(30000);
  const problems = [...[watch(a, 'device A'), watch(b, 'device B')]];
  // Everything the pages send: request URLs and bodies, WebSocket URLs and frames.
  const sent = [];
  const tokens = [];
  for (const page of [a, b]) {
    page.on('request', (r) => sent.push({ url: r.url(), body: r.postData() ?? '' }));
    page.on('response', async (r) => {
      if (r.url().endsWith('/v1/dev/token')) tokens.push((await r.json()).token);
    });
    page.on('websocket', (ws) => {
      sent.push({ url: ws.url(), body: '', websocket: true });
      ws.on('framesent', (f) => sent.push({ url: ws.url(), body: String(f.payload), websocket: true }));
    });
  }

  console.log('flow: sign in and see an answer stream; a second device sees the same answer');
  await signIn(a, base, USER, PASSPHRASE);
  await signIn(b, base, USER, PASSPHRASE);
  const chats = a.locator('[data-testid=chat-list-item]');
  await a.click('[data-testid=new-chat]');
  await say(a, 'Tell me about kiwis and stall a little');
  await a.locator('[data-testid=message][data-role=user][data-state=done]').waitFor();
  // The fake model holds the answer after its first paragraph: the page shows it streaming.
  await a.locator(assistant('streaming')).filter({ hasText: 'starts with' }).waitFor();
  await a.locator('[data-testid=cancel]').waitFor({ state: 'visible' });
  await need('release');
  await count(a, assistant('done'), 1);
  await a.locator('[data-testid=cancel]').waitFor({ state: 'hidden' });
  const first = await a.locator(assistant('done')).innerText();
  assert.match(first, /starts with[\s\S]*ends with/);
  // The other device learnt of the chat; opening it shows the same answer.
  await b.locator('[data-testid=chat-list-item]').first().click();
  await count(b, assistant('done'), 1);
  assert.equal(await b.locator(assistant('done')).innerText(), first);
  assert.equal(await b.locator('[data-testid=message][data-role=user]').innerText(), 'Tell me about kiwis and stall a little');
  await a.locator('[data-testid=suggestion]').first().waitFor();
  assert.equal(await a.locator('[data-testid=suggestion]').count(), 6);

  console.log('flow: reload mid-answer, the answer resumes without duplicated text');
  await say(a, 'And their seeds? Stall again');
  await a.locator(assistant('streaming')).filter({ hasText: 'starts with' }).waitFor();
  await a.reload();
  await a.waitForSelector('#connection[data-state=open]');
  // Shown again at once from IndexedDB, then resumed from the server's log.
  await a.locator(assistant('streaming')).filter({ hasText: 'starts with' }).waitFor();
  await need('release');
  await count(a, assistant('done'), 2);
  const resumed = await a.locator(assistant('done')).nth(1).innerText();
  assert.equal(occurrences(resumed, 'starts with'), 1, `duplicated text: ${resumed}`);
  assert.equal(occurrences(resumed, 'ends with'), 1, `duplicated text: ${resumed}`);
  assert.equal(await a.locator(assistant()).count(), 2);
  assert.equal(await a.locator('[data-testid=message][data-role=user]').count(), 2);

  console.log('flow: chatd restarts with an empty cache; the page re-sends the history by itself');
  const opened = Number(await a.locator('#connection').getAttribute('data-opened'));
  await need('restart-empty');
  await a.waitForSelector(`#connection[data-state=open][data-opened="${opened + 1}"]`);
  await say(a, 'What did I ask you before?');
  await count(a, assistant('done'), 3);
  await need('check-context', [
    'Tell me about kiwis and stall a little',
    'And their seeds? Stall again',
    'What did I ask you before?',
  ]);
  assert.equal(await a.locator('#notices').innerText(), '', 'the re-send was not silent');
  await a.locator('[data-testid=suggestion]').first().waitFor();
  if (screenshot) await a.screenshot({ path: screenshot });
  const kiwi = await a.evaluate(() => sessionStorage.getItem('chatd-demo-chat'));
  const kiwiAnswers = await a.locator(assistant('done')).allInnerTexts();

  console.log('flow: stop a slow skill from its card');
  await a.click('[data-testid=new-chat]');
  await say(a, 'Please find slowly the ripest mango');
  const stop = a.locator('[data-testid=embed][data-status=processing] [data-testid=stop-skill]');
  await stop.waitFor();
  await need('skill-in-flight');
  await stop.click();
  await a.locator('[data-testid=embed][data-status=cancelled]').waitFor();
  await a.locator(assistant('done')).filter({ hasText: 'without the slow search' }).waitFor();
  await need('skill-hung-up');
  await chats.nth(1).waitFor();

  console.log('flow: a broken link is repaired, and the page says so');
  await say(a, 'Give me a link to a page');
  await a.locator(assistant('done')).filter({ hasText: 'ends after the link' }).locator('[data-testid=links-repaired]').waitFor();
  const repaired = a.locator(assistant('done')).filter({ hasText: 'ends after the link' }).locator('a');
  assert.match(await repaired.getAttribute('href'), /^https:\/\/search\.brave\.com\/search\?q=/);

  console.log('flow: cancel an answer while it streams');
  await say(a, 'One more, stall and be cancelled');
  await a.locator(assistant('streaming')).filter({ hasText: 'starts with' }).waitFor();
  await a.click('[data-testid=cancel]');
  await a.locator(assistant('done')).filter({ hasText: 'Stopped.' }).waitFor();
  await need('forget-stall');

  console.log('flow: a message chatd took but never confirmed to the page is sent again after a reload, and answered once');
  // The page's socket goes through this script from here. First nothing chatd sends after
  // the message reaches the page (chatd takes it and starts the answer; the page never hears
  // it was confirmed); after a reload the confirmation of the copy sent again is held back
  // until the page showed the message as pending; then everything passes.
  const again = 'Send this again after a reload, and stall';
  let phase = 'mute';
  /** @type {string[]} */
  const resent = [];
  /** @type {(() => void)[]} */
  const held = [];
  let heldOne = () => {};
  const confirmationHeld = new Promise((resolve) => { heldOne = resolve; });
  await a.routeWebSocket(/\/v1\/ws/, (ws) => {
    const server = ws.connectToServer();
    let muted = false;
    ws.onMessage((m) => {
      const f = JSON.parse(String(m));
      if (f.type === 'chat_message_added' && f.payload.message.content === again) {
        if (phase === 'mute') muted = true;
        else resent.push(f.payload.message.message_id);
      }
      server.send(m);
    });
    server.onMessage((m) => {
      if (muted) return;
      const f = JSON.parse(String(m));
      if (phase === 'hold' && f.type === 'chat_message_confirmed' && resent.includes(f.payload.message_id)) {
        held.push(() => ws.send(m));
        heldOne();
        return;
      }
      ws.send(m);
    });
  });
  const answers = await a.locator(assistant()).count();
  await a.reload();
  await a.waitForSelector('#connection[data-state=open]');
  await count(a, assistant('done'), answers);
  await say(a, again);
  const pending = a.locator('[data-testid=message][data-role=user][data-pending=true]').filter({ hasText: again });
  await pending.waitFor();
  const againId = await pending.getAttribute('data-message-id');
  await need('asked', again);
  phase = 'hold';
  await a.reload();
  await a.waitForSelector('#connection[data-state=open]');
  // Shown from IndexedDB as not yet confirmed, and sent again with the same id after the sync.
  await a.locator(`[data-testid=message][data-message-id="${againId}"][data-pending=true]`).waitFor();
  await within(confirmationHeld, 30000, 'the page did not send the message again after the reload');
  phase = 'pass';
  for (const send of held) send();
  await a.locator(`[data-testid=message][data-message-id="${againId}"][data-pending=false]`).waitFor();
  await need('release');
  await count(a, assistant('done'), answers + 1);
  await need('asked-once', again);
  assert.deepEqual(resent, [againId]);
  assert.equal(await a.locator('[data-testid=message][data-role=user]').filter({ hasText: again }).count(), 1);
  assert.equal(await a.locator(assistant()).count(), answers + 1);
  const againChat = await a.evaluate(() => sessionStorage.getItem('chatd-demo-chat'));

  console.log('flow: the passphrase never leaves the browser; the token is in no URL but the WebSocket\'s');
  assert.ok(tokens.length >= 2 && sent.length > 20);
  for (const { url, body, websocket } of sent) {
    assert.ok(!url.includes(PASSPHRASE) && !body.includes(PASSPHRASE), `the passphrase was sent to ${url}`);
    for (const token of tokens) {
      if (!websocket) assert.ok(!url.includes(token), `a token in the URL ${url}`);
      assert.ok(!body.includes(token), `a token in what was sent to ${url}`);
    }
  }
  assert.ok(sent.some((s) => s.websocket && s.url.includes(tokens[0])));

  console.log('flow: a new device signs in and gets every chat by phased sync, decrypted with the same passphrase');
  const c = await (await chrome.newContext()).newPage();
  c.setDefaultTimeout(30000);
  problems.push(watch(c, 'device C'));
  await signIn(c, base, USER, PASSPHRASE);
  await count(c, '[data-testid=chat-list-item]', 2);
  await c.locator(`[data-testid=chat-list-item][data-chat-id="${kiwi}"]`).click();
  await count(c, assistant('done'), 3);
  assert.deepEqual(await c.locator(assistant('done')).allInnerTexts(), kiwiAnswers);
  assert.equal(await c.locator(`[data-testid=chat-list-item][data-chat-id="${kiwi}"]`).innerText(), 'Kiwis and other fruit');
  // The message sent again after the reload was stored once confirmed: the sync brings it.
  await c.locator(`[data-testid=chat-list-item][data-chat-id="${againChat}"]`).click();
  await count(c, `[data-testid=message][data-role=user][data-message-id="${againId}"]`, 1);
  assert.equal(await c.locator('[data-testid=message][data-role=user]').filter({ hasText: again }).count(), 1);

  assert.deepEqual(problems.flat(), [], 'script errors or CSP violations on the pages');

  console.log('flow: nothing typed or answered is in the server\'s store or Redis in plaintext');
  await need('scan');
  console.log('browser flows passed');
} finally {
  await chrome.close();
  stopInput();
}
