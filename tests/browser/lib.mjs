// Shared by the browser tests and the page benchmark: Debian's Chromium driven by
// playwright-core from the test cache (scripts/test installs both; nothing is downloaded
// here), and the line protocol with the Rust test that runs the servers.
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export const CHROMIUM = process.env.CHATD_CHROMIUM ?? '/usr/bin/chromium';
const cache = process.env.CHATD_PLAYWRIGHT_DIR
  ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'chatd-test', 'node');

/** playwright-core from the cache folder; a missing one is an error, never a skip. */
export function playwright() {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install -y chromium (scripts/test does)`);
  const require = createRequire(join(cache, 'package.json'));
  try {
    return require('playwright-core');
  } catch (e) {
    throw new Error(`playwright-core not found in ${cache}: npm install --prefix ${cache} playwright-core (scripts/test does): ${e.message}`);
  }
}

/**
 * A headless Chromium (a fresh temporary profile, which Playwright makes and removes);
 * each `newContext()` is a device of its own (its own IndexedDB and session storage).
 */
export async function launch() {
  const { chromium } = playwright();
  const args = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'];
  const browser = await chromium.launch({ executablePath: CHROMIUM, args, headless: true });
  return {
    browser,
    newContext: () => browser.newContext({ viewport: { width: 1280, height: 760 } }),
    close: () => browser.close(),
  };
}

const lines = createInterface({ input: process.stdin });
const replies = lines[Symbol.asyncIterator]();

/** Asks the Rust side to act (release a stalled answer, restart chatd...) and waits until it has. */
export async function need(action, arg) {
  process.stdout.write(`@need ${action}${arg === undefined ? '' : ' ' + JSON.stringify(arg)}\n`);
  const { value, done } = await replies.next();
  if (done || value.trim() !== 'ok') throw new Error(`${action}: the test answered ${done ? 'nothing' : value}`);
}

/** Tells the Rust side a text that was typed (it must never be found in plaintext on the server). */
export function typed(text) {
  process.stdout.write(`@typed ${JSON.stringify(text)}\n`);
}

export function stopInput() {
  lines.close();
}

/**
 * Logs page errors and console errors, so a failing flow says why; returns the list of
 * problems a flow must not have: script errors and Content-Security-Policy violations.
 */
export function watch(page, name) {
  const problems = [];
  page.on('pageerror', (e) => {
    console.log(`[${name}] page error: ${e.message}`);
    problems.push(`page error: ${e.message}`);
  });
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    console.log(`[${name}] console: ${m.text()}`);
    if (m.text().includes('Content Security Policy')) problems.push(`CSP: ${m.text()}`);
  });
  return problems;
}

/** Signs in on the demo page and waits for the chat screen. */
export async function signIn(page, base, user, passphrase) {
  await page.goto(base);
  await page.fill('[data-testid=login-user]', user);
  await page.fill('[data-testid=login-passphrase]', passphrase);
  await page.click('[data-testid=login-submit]');
  // The chat list is behind a menu on a phone; the composer is always there.
  await page.waitForSelector('[data-testid=chat-input]', { state: 'visible' });
  await page.waitForSelector('#connection[data-state=open]', { state: 'attached' });
}
