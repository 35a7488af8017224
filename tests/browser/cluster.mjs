// The demo page on node A of a cluster while the node running an answer dies (run by
// tests/it/browser_cluster.rs, which starts the nodes and acts when this script prints
// `@need`). Every wait is on the page's DOM state; nothing sleeps.
//
// Env: CHATD_URL (the page, on node A).
import assert from 'node:assert/strict';
import { launch, need, signIn, stopInput, watch } from './lib.mjs';

const base = process.env.CHATD_URL;
assert.ok(base, 'CHATD_URL is not set');

/** @param {string} [state] */
const assistant = (state) => `[data-testid=message][data-role=assistant]${state ? `[data-state=${state}]` : ''}`;

const chrome = await launch();
try {
  const page = await (await chrome.newContext()).newPage();
  page.setDefaultTimeout(30000);
  const problems = watch(page, 'node A');

  console.log('flow: an answer running on node B streams to the page on node A');
  await signIn(page, base, 'alice', 'a passphrase for the cluster');
  await page.click('[data-testid=new-chat]');
  await page.fill('[data-testid=chat-input]', 'Hello from node A');
  await page.click('[data-testid=send]');
  await page.locator(assistant('done')).waitFor();
  const chat = await page.evaluate(() => sessionStorage.getItem('chatd-demo-chat'));
  const opened = await page.locator('#connection').getAttribute('data-opened');
  await need('answer-on-the-other-node', chat);
  const cut = page.locator(assistant()).filter({ hasText: 'Second part.' });
  await page.locator(assistant('streaming')).filter({ hasText: 'Second part.' }).waitFor();

  console.log('flow: node B is killed; node A ends the answer with node_lost, and the page says so');
  await need('kill-the-turns-node');
  await cut.and(page.locator(assistant('done'))).locator('[data-testid=notice]')
    .filter({ hasText: 'the server running this answer stopped' }).waitFor();
  await page.locator('#notices [data-testid=notice]')
    .filter({ hasText: 'node_lost: the server running this answer stopped; the chat goes on' }).waitFor();
  // The text streamed before the loss stays; the ending is not the user's "Stopped.".
  assert.match(await cut.locator('.body').innerText(), /First part\.\s+Second part\./);
  const shown = await page.locator('#messages').innerHTML();
  assert.equal(await page.getByText('Stopped.', { exact: true }).count(), 0, shown);
  assert.equal(await cut.locator('.meta').count(), 0, shown);
  // The page's own node never went away: the same socket, still open.
  assert.equal(await page.locator('#connection').getAttribute('data-state'), 'open');
  assert.equal(await page.locator('#connection').getAttribute('data-opened'), opened);

  console.log('flow: the chat goes on, on node A');
  await page.fill('[data-testid=chat-input]', 'Still there?');
  await page.click('[data-testid=send]');
  await page.waitForFunction((s) => document.querySelectorAll(s).length === 3, assistant('done'));
  assert.equal(await page.locator(assistant('streaming')).count(), 0);

  assert.deepEqual(problems, [], 'script errors or CSP violations on the page');
  console.log('cluster flow passed');
} finally {
  await chrome.close();
  stopInput();
}
