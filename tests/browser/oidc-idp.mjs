// A real OpenID Connect provider for the sign-in test: npm `oidc-provider` (from the test
// cache, like playwright-core) on 127.0.0.1:$IDP_PORT, with one public client, the demo
// page ($CHATD_ORIGIN/ as its redirect URI, PKCE, no secret), and the package's own
// development login and consent pages (any login name; it becomes `sub`). Prints
// `idp ready` once it listens; stops when its stdin closes.
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

// The cache folder scripts/test installs into (as tests/browser/lib.mjs finds it).
const nodeCache = process.env.CHATD_PLAYWRIGHT_DIR
  ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'chatd-test', 'node');

const port = Number(process.env.IDP_PORT);
const origin = process.env.CHATD_ORIGIN;
if (!port || !origin) throw new Error('IDP_PORT and CHATD_ORIGIN are required');

const require = createRequire(join(nodeCache, 'package.json'));
let entry;
try {
  entry = require.resolve('oidc-provider');
} catch (e) {
  throw new Error(`oidc-provider not found in ${nodeCache}: npm install --prefix ${nodeCache} oidc-provider (scripts/test does): ${e.message}`);
}
const { default: Provider } = await import(pathToFileURL(entry).href);

const issuer = `http://127.0.0.1:${port}`;
const provider = new Provider(issuer, {
  clients: [{
    client_id: 'chatd-page',
    token_endpoint_auth_method: 'none',
    grant_types: ['authorization_code'],
    response_types: ['code'],
    redirect_uris: [`${origin}/`],
  }],
  pkce: { required: () => true },
  async findAccount(_ctx, id) {
    return { accountId: id, claims: async () => ({ sub: id }) };
  },
});
// The package warns about its development defaults (keys, login pages): expected here.
provider.on('server_error', (_ctx, err) => console.error(`idp: ${err.message}`));

const server = createServer(provider.callback());
server.listen(port, '127.0.0.1', () => console.log('idp ready'));
process.stdin.on('end', () => server.close(() => process.exit(0)));
process.stdin.resume();
