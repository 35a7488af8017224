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

  console.log('flow: a message sent while an answer streams is queued (and said so); cancel the answer, the queued one is answered');
  const before = await a.locator(assistant()).count();
  await say(a, 'One more, stall and be cancelled');
  await a.locator(assistant('streaming')).filter({ hasText: 'starts with' }).waitFor();
  await say(a, 'Queue this one behind it');
  await a.locator('#notices [data-testid=notice]').filter({ hasText: 'answered next' }).waitFor();
  await a.click('[data-testid=cancel]');
  await a.locator(assistant('done')).filter({ hasText: 'Stopped.' }).waitFor();
  await need('forget-stall');
  await count(a, assistant('done'), before + 2);
  assert.equal(await a.locator(assistant('done')).filter({ hasText: 'Stopped.' }).locator('[data-testid=notice]').count(), 0);

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
  const mango = againChat;

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

  console.log('flow: a skill\'s card keeps its app\'s label after a reload and on a device that synced it');
  await c.locator(`[data-testid=chat-list-item][data-chat-id="${mango}"]`).click();
  for (const [name, page] of [['after a reload', a], ['synced', c]]) {
    // Below the answer it belongs to.
    const card = page.locator(assistant('done')).filter({ hasText: 'without the slow search' }).locator('[data-testid=embed]');
    try {
      await card.waitFor();
    } catch (e) {
      const seen = await page.evaluate(() => [...document.querySelectorAll('[data-testid=message]')].map((m) => `${m.dataset.role}: ${m.textContent.slice(0, 60)} [${m.querySelectorAll('[data-testid=embed]').length} embeds]`));
      throw new Error(`no card ${name}: ${JSON.stringify(seen)}\n${e.message}`);
    }
    assert.equal(await card.getAttribute('data-status'), 'cancelled');
    assert.match(await card.locator('header').innerText(), /^demo · find/);
    assert.ok(!(await card.innerText()).includes('app_skill_use'));
  }

  console.log('flow: the model\'s reasoning shows collapsed, also after a reload, and is stored only encrypted');
  await a.click('[data-testid=new-chat]');
  await say(a, 'Think about kiwis first');
  const thought = a.locator(assistant('done')).locator('[data-testid=reasoning]');
  await thought.waitFor();
  for (const when of ['live', 'reloaded']) {
    assert.equal(await thought.evaluate((d) => d.open), false, `open when ${when}`);
    assert.match(await thought.textContent(), /I weigh the kiwi carefully\. It looks ripe enough\./);
    assert.equal(await thought.locator('.thought').isVisible(), false);
    assert.ok(!(await a.locator(assistant('done')).locator('.body').innerText()).includes('weigh'));
    if (when === 'live') {
      await a.reload();
      await a.waitForSelector('#connection[data-state=open]');
      await thought.waitFor();
    }
  }
  await thought.locator('summary').click();
  assert.equal(await thought.locator('.thought').isVisible(), true);

  console.log('flow: a routine shows its progress, its question is answered inline; another run is cancelled');
  await say(a, 'Start the fruit routine');
  const run = a.locator('[data-testid=routine-progress]');
  await a.locator('[data-testid=routine-question]').filter({ hasText: 'Which fruit should I buy?' }).waitFor();
  assert.match(await run.innerText(), /travel\.ask/);
  typed('a basket of lychees');
  await a.fill('[data-testid=routine-answer]', 'a basket of lychees');
  await a.press('[data-testid=routine-answer]', 'Enter');
  await a.locator('[data-testid=routine-progress][data-state=finished]').filter({ hasText: 'completed' }).waitFor();
  await a.locator('[data-testid=message]').filter({ hasText: 'Buying a basket of lychees today.' }).waitFor();
  await a.locator('[data-testid=message][data-role=user]').filter({ hasText: 'a basket of lychees' }).waitFor();
  await say(a, 'Start the fruit routine once more');
  await a.locator('[data-testid=routine-progress][data-state=waiting] [data-testid=routine-cancel]').click();
  await a.locator('[data-testid=routine-progress][data-state=finished]').filter({ hasText: 'cancelled' }).waitFor();
  assert.equal(await a.locator('[data-testid=routine-progress] [data-testid=routine-cancel]').count(), 0);

  console.log('flow: the user starts and ends a focus mode; every device showing the chat sees it');
  const focusChat = await a.evaluate(() => sessionStorage.getItem('chatd-demo-chat'));
  await b.locator(`[data-testid=chat-list-item][data-chat-id="${focusChat}"]`).click();
  // Offered from the server's list of focus modes.
  await a.locator('#focus-known option[value="docs-deep_dive"]').waitFor({ state: 'attached' });
  await a.fill('[data-testid=focus-id]', 'docs-deep_dive');
  await a.click('[data-testid=focus-toggle]');
  for (const page of [a, b]) {
    await page.locator('[data-testid=focus-indicator]').filter({ hasText: 'docs-deep_dive' }).waitFor();
  }
  await a.click('[data-testid=focus-toggle]');
  for (const page of [a, b]) await page.locator('[data-testid=focus-indicator]').waitFor({ state: 'hidden' });

  console.log('flow: settings/memories: a request answered from one device closes on every device; a proposal and a suggestion');
  await a.click('[data-testid=new-chat]');
  await say(a, 'Help me plan my trip');
  const dialog = a.locator('[data-testid=settings-dialog]');
  await dialog.waitFor();
  const tripChat = await a.evaluate(() => sessionStorage.getItem('chatd-demo-chat'));
  await b.locator(`[data-testid=chat-list-item][data-chat-id="${tripChat}"]`).click();
  await b.locator('[data-testid=settings-dialog]').waitFor();
  await a.locator(assistant('done')).waitFor();
  await a.locator('[data-testid=memory-proposal]').filter({ hasText: 'Kyoto' }).waitFor();
  await a.click('[data-testid=memory-proposal] [data-testid=proposal-accept]');
  await count(a, '[data-testid=memory-proposal]', 0);
  // A form from the category's JSON Schema (the request carries it).
  await dialog.locator('input[name=destination]').fill('Lisbon');
  await dialog.locator('input[name=travellers]').fill('2');
  await dialog.locator('[data-testid=settings-confirm]').click();
  for (const page of [a, b]) await count(page, '[data-testid=settings-dialog]', 0);
  for (const page of [a, b]) await page.locator('[data-testid=memory-suggestion]').filter({ hasText: 'Kyoto in Autumn' }).waitFor();
  await a.click('[data-testid=memory-suggestion] [data-testid=memory-reject]');
  for (const page of [a, b]) await count(page, '[data-testid=memory-suggestion]', 0);

  console.log('flow: chatd shuts down while an answer streams: the answer ends as cut by the shutdown, said so, and the page reconnects');
  const beforeShutdown = Number(await a.locator('#connection').getAttribute('data-opened'));
  await say(a, 'Tell me about figs, and stall');
  await a.locator(assistant('streaming')).filter({ hasText: 'starts with' }).waitFor();
  await need('shut-down-and-restart');
  await a.locator(assistant('done')).locator('[data-testid=notice]').filter({ hasText: 'the server restarted' }).waitFor();
  assert.equal(await a.locator(assistant('done')).filter({ hasText: 'Stopped.' }).count(), 0);
  await a.waitForSelector(`#connection[data-state=open][data-opened="${beforeShutdown + 1}"]`);

  console.log('flow: a wrong passphrase is refused at sign-in before anything is written; a phone-sized screen never scrolls sideways');
  const phone = await chrome.browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
  const d = await phone.newPage();
  d.setDefaultTimeout(30000);
  problems.push(watch(d, 'phone'));
  await signIn(d, base, USER, PASSPHRASE);
  await d.locator('[data-testid=menu-toggle]').click();
  await d.click('#sign-out');
  await d.waitForSelector('[data-testid=login-submit]', { state: 'visible' });
  await d.fill('[data-testid=login-user]', USER);
  await d.fill('[data-testid=login-passphrase]', 'not the passphrase');
  await d.click('[data-testid=login-submit]');
  await d.locator('[data-testid=login-error]').filter({ hasText: 'Wrong passphrase' }).waitFor();
  assert.ok(await d.locator('#app').isHidden());
  assert.ok(!(await d.evaluate(async () => (await indexedDB.databases()).map((x) => x.name))).includes(`chatd:${USER}`));
  assert.equal(await d.evaluate(() => sessionStorage.length), 0);
  // A browser that never saw the user: the check value the server keeps refuses it too.
  const fresh = await (await chrome.newContext()).newPage();
  problems.push(watch(fresh, 'new browser'));
  await fresh.goto(base);
  await fresh.fill('[data-testid=login-user]', USER);
  await fresh.fill('[data-testid=login-passphrase]', 'not the passphrase either');
  await fresh.click('[data-testid=login-submit]');
  await fresh.locator('[data-testid=login-error]').filter({ hasText: 'Wrong passphrase' }).waitFor();
  assert.ok(await fresh.locator('#app').isHidden());
  assert.ok(!(await fresh.evaluate(async () => (await indexedDB.databases()).map((x) => x.name))).includes(`chatd:${USER}`));
  await fresh.context().close();
  await signIn(d, base, USER, PASSPHRASE);
  await d.locator('[data-testid=login-error]').waitFor({ state: 'hidden' });
  await d.locator('[data-testid=menu-toggle]').click();
  await d.locator(`[data-testid=chat-list-item][data-chat-id="${kiwi}"]`).click();
  await count(d, assistant('done'), 3);
  const unbroken = `A-very-long-word-${'kiwi'.repeat(40)}`;
  await say(d, unbroken);
  await count(d, assistant('done'), 4);
  for (const [width, height] of [[390, 844], [320, 640]]) {
    await d.setViewportSize({ width, height });
    for (const menu of [false, true]) {
      if (menu) await d.locator('[data-testid=menu-toggle]').click();
      const { scroll, inner } = await d.evaluate(() => ({ scroll: document.scrollingElement.scrollWidth, inner: innerWidth }));
      assert.ok(scroll <= inner, `${scroll} px wide content on a ${inner} px screen (menu ${menu})`);
      const box = await d.locator('[data-testid=chat-input]').boundingBox();
      assert.ok(box && box.y >= 0 && box.y + box.height <= height, `the composer is off screen at ${width}x${height}: ${JSON.stringify(box)}`);
      assert.ok(await d.locator('[data-testid=send]').isVisible());
      if (menu) await d.locator('[data-testid=menu-toggle]').click();
    }
  }

  assert.deepEqual(problems.flat(), [], 'script errors or CSP violations on the pages');

  console.log('flow: nothing typed or answered is in the server\'s store or Redis in plaintext');
  await need('scan');
  console.log('browser flows passed');
} finally {
  await chrome.close();
  stopInput();
}
