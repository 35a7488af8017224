// Page load → first token of an answer, in headless Chromium against a running chatd, and
// the size of the page's assets. A benchmark (timing lives here, never in tests).
//
//   chatd serve &                                  # embedded mode: the demo and dev sign-in on
//   node load-tests/browser/page_first_token.mjs http://127.0.0.1:8787/ [rounds]
//
// cold: a new browser context opens the page, signs in (PBKDF2 included) and sends a message.
// warm: a signed-in tab (token in sessionStorage, key in IndexedDB) is reloaded and sends a
// message as soon as the input is there. Times are from the navigation start (the page's
// performance clock) to the first assistant text in the DOM, and the parts in between.
import { gzipSync } from 'node:zlib';
import { launch } from '../../tests/browser/lib.mjs';

const base = process.argv[2] ?? 'http://127.0.0.1:8787/';
const rounds = Number(process.argv[3] ?? 10);

/** Marks the first assistant text and the input becoming usable, on the page's clock. */
async function watchFirstToken(page) {
  await page.evaluate(() => {
    const w = /** @type {any} */ (window);
    w.__marks = {};
    const seen = () => {
      const input = document.querySelector('[data-testid=chat-input]');
      if (!w.__marks.ready && input && input.offsetParent) w.__marks.ready = performance.now();
      const a = [...document.querySelectorAll('[data-testid=message][data-role=assistant] .body')].at(-1);
      if (!w.__marks.first && a && a.textContent.trim()) w.__marks.first = performance.now();
    };
    new MutationObserver(seen).observe(document, { subtree: true, childList: true, characterData: true, attributes: true });
    seen();
  });
}

const marks = (page) => page.evaluate(() => /** @type {any} */ (window).__marks);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const p90 = (xs) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * 0.9))];

const chrome = await launch();
const cold = { ready: [], first: [] };
const warm = { ready: [], send: [], first: [] };
let bytes = 0;
let gzip = 0;
try {
  for (let i = 0; i < rounds; i++) {
    const context = await chrome.newContext();
    const page = await context.newPage();
    const assets = new Map();
    page.on('response', async (r) => {
      if (r.request().resourceType() === 'websocket') return;
      try {
        assets.set(r.url(), await r.body());
      } catch { /* redirects, aborted */ }
    });
    await page.goto(base);
    await watchFirstToken(page);
    await page.fill('[data-testid=login-user]', `bench-${Date.now()}-${i}`);
    await page.fill('[data-testid=login-passphrase]', 'benchmark passphrase');
    await page.click('[data-testid=login-submit]');
    await page.fill('[data-testid=chat-input]', 'How fast is the first token?');
    await page.click('[data-testid=send]');
    await page.waitForFunction(() => /** @type {any} */ (window).__marks.first);
    const c = await marks(page);
    cold.ready.push(c.ready);
    cold.first.push(c.first);
    await page.waitForSelector('[data-testid=message][data-role=assistant][data-state=done]');
    if (i === 0) {
      const all = [...assets.entries()].filter(([u]) => !u.includes('/v1/'));
      bytes = all.reduce((n, [, b]) => n + b.length, 0);
      gzip = all.reduce((n, [, b]) => n + gzipSync(b).length, 0);
      console.log(`assets: ${all.map(([u, b]) => `${new URL(u).pathname} ${b.length} B`).join(', ')}`);
    }
    // Warm: the same signed-in tab, reloaded.
    await page.reload();
    await watchFirstToken(page);
    await page.waitForSelector('#connection[data-state=open]');
    await page.click('[data-testid=new-chat]');
    await page.waitForFunction(() => !document.querySelector('[data-testid=message]'));
    // The reloaded tab showed the last chat's answers: count only the new chat's.
    const sendAt = await page.evaluate(() => {
      /** @type {any} */ (window).__marks.first = undefined;
      return performance.now();
    });
    await page.fill('[data-testid=chat-input]', 'And after a reload?');
    await page.click('[data-testid=send]');
    await page.waitForFunction(() => /** @type {any} */ (window).__marks.first);
    const w = await marks(page);
    warm.ready.push(w.ready);
    warm.send.push(w.first - sendAt);
    warm.first.push(w.first);
    await page.waitForSelector('[data-testid=message][data-role=assistant][data-state=done]');
    await context.close();
  }
} finally {
  await chrome.close();
}
const f = (xs) => `median ${median(xs).toFixed(0)} ms, p90 ${p90(xs).toFixed(0)} ms`;
console.log(`rounds: ${rounds}`);
console.log(`asset bytes (uncompressed): ${bytes} (gzip ${gzip})`);
console.log(`cold: page load -> signed in (chat screen usable; PBKDF2 included): ${f(cold.ready)}`);
console.log(`cold: page load -> first token (sign-in with PBKDF2, send, answer): ${f(cold.first)}`);
console.log(`warm: page load -> input usable (signed in): ${f(warm.ready)}`);
console.log(`warm: send -> first token: ${f(warm.send)}`);
console.log(`warm: page load -> first token (new chat, send, answer): ${f(warm.first)}`);
