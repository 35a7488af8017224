// The README's pictures of the demo page, taken from a running chatd on its embedded
// defaults (the simulated model, the docs-search skill): a desktop window and a phone.
//
//   chatd serve &
//   node load-tests/browser/screenshots.mjs http://127.0.0.1:8787/ protocol/js
//
// Writes demo.png (1280x760) and demo-phone.png (390x844) into the folder. Not a test: the
// pixels differ from run to run.
import { join } from 'node:path';
import { launch } from '../../tests/browser/lib.mjs';

const base = process.argv[2] ?? 'http://127.0.0.1:8787/';
const out = process.argv[3] ?? 'protocol/js';
const user = `ada-${Date.now()}`;
const passphrase = 'a long passphrase only this browser knows';

const { browser, close } = await launch();

/** Signs in on a fresh device of `size` and waits for the chat screen. */
async function device(size) {
  const page = await (await browser.newContext({ viewport: size })).newPage();
  page.setDefaultTimeout(60000);
  await page.goto(base);
  await page.fill('[data-testid=login-user]', user);
  await page.fill('[data-testid=login-passphrase]', passphrase);
  await page.click('[data-testid=login-submit]');
  await page.waitForSelector('#connection[data-state=open]', { state: 'attached' });
  return page;
}

/** Sends a message and waits until its answer is done. */
async function ask(page, text) {
  const done = page.locator('[data-testid=message][data-role=assistant][data-state=done]');
  const before = await done.count();
  await page.fill('[data-testid=chat-input]', text);
  await page.press('[data-testid=chat-input]', 'Enter');
  await done.nth(before).waitFor();
}

const desk = await device({ width: 1280, height: 760 });
await ask(desk, 'How do I run chatd with Redis as a cluster of nodes?');
await ask(desk, 'Search the docs for how the AI cache is sealed');
await desk.locator('[data-testid=suggestion]').first().waitFor().catch(() => {});
await desk.screenshot({ path: join(out, 'demo.png') });

const phone = await device({ width: 390, height: 844 });
await phone.locator('[data-testid=menu-toggle]').click();
await phone.locator('[data-testid=chat-list-item]').first().click();
await phone.locator('[data-testid=message][data-role=assistant][data-state=done]').nth(1).waitFor();
await phone.screenshot({ path: join(out, 'demo-phone.png') });

await close();
console.log(`wrote ${join(out, 'demo.png')} and ${join(out, 'demo-phone.png')}`);
