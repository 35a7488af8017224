// The demo page's ways in, in headless Chromium, against a chatd without development
// sign-in: its OpenID Connect provider (a real `oidc-provider`, its own login and consent
// pages; the authorization code flow with PKCE in the page), and a token pasted from
// `chatd token` (the Rust side runs the CLI: `@need token`). Each way ends in a streamed
// answer. Run by tests/it/browser_sign_in.rs, which starts the servers.
import { readFileSync } from 'node:fs';
import { launch, need, stopInput, typed, watch } from './lib.mjs';

const base = process.env.CHATD_URL;
const USER = 'alice@example.org';
const PASSPHRASE = 'correct horse battery staple';

const { newContext, close } = await launch();
const failures = [];
const problems = [];

async function flow(name, run) {
  try {
    await run();
    console.log(`ok: ${name}`);
  } catch (e) {
    console.log(`FAILED: ${name}: ${e.stack ?? e}`);
    failures.push(name);
  }
}

/** Sends a message and waits for the streamed answer to finish. */
async function chat(page, text) {
  typed(text);
  await page.fill('[data-testid=chat-input]', text);
  await page.press('[data-testid=chat-input]', 'Enter');
  await page.locator('[data-testid=message][data-role=assistant][data-state=done]').filter({ hasText: 'signed-in answer' }).first().waitFor();
}

/** The passphrase step, then the chat screen with an open socket. */
async function passphrase(page) {
  await page.fill('[data-testid=login-passphrase]', PASSPHRASE);
  await page.click('[data-testid=login-submit]');
  await page.waitForSelector('[data-testid=chat-input]', { state: 'visible' });
  await page.waitForSelector('#connection[data-state=open]', { state: 'attached' });
}

await flow('sign-in with the OpenID provider (code flow with PKCE)', async () => {
  const page = await (await newContext()).newPage();
  problems.push(...watch(page, 'oidc'));
  await page.goto(base);
  const button = page.locator('[data-testid=login-oidc]');
  await button.waitFor();
  if (await page.locator('[data-testid=login-user]').isVisible()) throw new Error('a user name field without development sign-in');
  await button.click();
  // The provider's own pages: any login name (it becomes `sub`), then consent.
  await page.waitForSelector('input[name=login]');
  if (new URL(page.url()).origin === new URL(base).origin) throw new Error('still on chatd');
  await page.fill('input[name=login]', USER);
  await page.fill('input[name=password]', 'anything');
  await page.click('button[type=submit]');
  // Then its consent page, when it asks (the first time), and back to the page.
  const consent = page.locator('button[type=submit]').filter({ hasText: 'Continue' });
  const back = page.locator('#login-who').filter({ hasText: USER });
  await consent.or(back).first().waitFor().catch(async (e) => {
    throw new Error(`${e.message}\nat ${page.url()}: ${(await page.locator('body').innerText()).slice(0, 500)}`);
  });
  if (await consent.isVisible()) await consent.click();
  await back.waitFor();
  if (page.url() !== `${base.replace(/\/$/, '')}/`) throw new Error(`the code stayed in the address: ${page.url()}`);
  await passphrase(page);
  if (!(await page.locator('#whoami').textContent()).includes(USER)) throw new Error('signed in as someone else');
  await chat(page, 'Hello from the provider sign-in');
  // A reload keeps the session (no second trip to the provider).
  await page.reload();
  await page.waitForSelector('#connection[data-state=open]', { state: 'attached' });
});

await flow('a token pasted from `chatd token`', async () => {
  const page = await (await newContext()).newPage();
  problems.push(...watch(page, 'token'));
  await page.goto(base);
  await page.locator('[data-testid=login-token]').waitFor();
  const hint = await page.locator('#login-hint').textContent();
  if (!hint.includes('chatd token --user')) throw new Error(`the page does not say how to get a token: ${hint}`);
  // Not a token: refused with what to do.
  await page.fill('[data-testid=login-token]', 'not a token');
  await page.fill('[data-testid=login-passphrase]', PASSPHRASE);
  await page.click('[data-testid=login-submit]');
  await page.locator('[data-testid=login-error]').filter({ hasText: 'not a session token' }).waitFor();
  // The Rust side runs `chatd token --user bob` and writes what it printed to the file.
  await need('token');
  const token = readFileSync(process.env.CHATD_TOKEN_FILE, 'utf8').trim();
  await page.fill('[data-testid=login-token]', token);
  await passphrase(page);
  if (!(await page.locator('#whoami').textContent()).includes('bob')) throw new Error('signed in as someone else');
  await chat(page, 'Hello from a pasted token');
});

await close();
stopInput();
if (problems.length) {
  console.log(`FAILED: page problems: ${problems.join('; ')}`);
  failures.push('page problems');
}
if (failures.length) {
  console.log(`failed: ${failures.join(', ')}`);
  process.exit(1);
}
console.log('sign-in flows passed');
