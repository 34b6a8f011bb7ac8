// A real OpenID provider (the `oidc-provider` package) for the single sign-on tests
// (tests/tests/sso.rs). Started with, in the environment:
//   ISSUER_PORT   the port to listen on (0: any; the same port again after a restart),
//   ISSUER_HOST   the host name the issuer URL uses (default localhost),
//   REDIRECT_URI  the control plane's callback, CLIENT_ID and CLIENT_SECRET.
// Prints one JSON line {"issuer": URL, "port": N, "kids": [...]} once it listens.
//
// Each start generates new signing keys (an RSA key for RS256, a P-256 key for ES256), so a
// restart is a key rotation. The authorization code flow requires PKCE (S256). The login page is
// the provider's own development login (any password); the accounts and their groups are below.
//
// Beside the provider, one test-only endpoint, POST /test/sign {alg, claims}: a JWT signed with
// this start's key for `alg`, so a test can present tokens the provider would never issue on its
// own (expired, for another audience) signed by the very keys its JWKS publishes.
import Provider from 'oidc-provider';
import { generateKeyPairSync, randomBytes, sign as signWith } from 'node:crypto';

const env = (name, fallback) => {
  const value = process.env[name] ?? fallback;
  if (value === undefined) throw new Error(`${name} is not set`);
  return value;
};
const port = Number(env('ISSUER_PORT', '0'));
const host = env('ISSUER_HOST', 'localhost');
const clientId = env('CLIENT_ID');
const clientSecret = env('CLIENT_SECRET');
const redirectUri = env('REDIRECT_URI');

const ACCOUNTS = {
  'admin@example.com': ['switchyard-admins', 'staff'],
  'viewer@example.com': ['switchyard-viewers'],
  'research-lead@example.com': ['research-admins'],
  'nobody@example.com': ['staff'],
};

const stamp = randomBytes(4).toString('hex');
const keys = {};
function newKey(alg) {
  const pair = alg === 'RS256'
    ? generateKeyPairSync('rsa', { modulusLength: 2048 })
    : generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const kid = `${alg.toLowerCase()}-${stamp}`;
  keys[alg] = { kid, privateKey: pair.privateKey };
  return { ...pair.privateKey.export({ format: 'jwk' }), kid, alg, use: 'sig' };
}
const jwks = { keys: [newKey('RS256'), newKey('ES256')] };

const b64 = (data) => Buffer.from(data).toString('base64url');
function signJwt(alg, claims) {
  const key = keys[alg];
  if (!key) throw new Error(`no key for ${alg}`);
  const input = `${b64(JSON.stringify({ alg, typ: 'JWT', kid: key.kid }))}.${b64(JSON.stringify(claims))}`;
  const signature = signWith('sha256', Buffer.from(input), alg === 'RS256'
    ? key.privateKey
    : { key: key.privateKey, dsaEncoding: 'ieee-p1363' });
  return `${input}.${b64(signature)}`;
}

async function listen() {
  // The issuer URL names the port, so a port of 0 is first resolved by a throwaway listener.
  if (port !== 0) return port;
  const { createServer } = await import('node:net');
  return new Promise((resolve) => {
    const probe = createServer().listen(0, () => {
      const chosen = probe.address().port;
      probe.close(() => resolve(chosen));
    });
  });
}

const chosen = await listen();
const issuer = `http://${host}:${chosen}`;
const provider = new Provider(issuer, {
  clients: [{
    client_id: clientId,
    client_secret: clientSecret,
    redirect_uris: [redirectUri],
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  jwks,
  pkce: { required: () => true },
  scopes: ['openid', 'email', 'groups'],
  claims: { openid: ['sub'], email: ['email', 'email_verified'], groups: ['groups'] },
  // The relying party reads the ID token only (no userinfo call): scope claims go into it.
  conformIdTokenClaims: false,
  cookies: { keys: [randomBytes(16).toString('hex')] },
  features: { devInteractions: { enabled: true } },
  async findAccount(_ctx, id) {
    if (!ACCOUNTS[id]) return undefined;
    return {
      accountId: id,
      claims: async () => ({ sub: id, email: id, email_verified: true, groups: ACCOUNTS[id] }),
    };
  },
  // Consent is implied for the one client: the test signs in, it does not approve scopes.
  async loadExistingGrant(ctx) {
    const id = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (id) return ctx.oidc.provider.Grant.find(id);
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope('openid email groups');
    grant.addOIDCClaims(['sub', 'email', 'email_verified', 'groups']);
    await grant.save();
    return grant;
  },
});

provider.use(async (ctx, next) => {
  if (ctx.path !== '/test/sign' || ctx.method !== 'POST') return next();
  const chunks = [];
  for await (const chunk of ctx.req) chunks.push(chunk);
  const { alg, claims } = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  ctx.type = 'application/json';
  ctx.body = JSON.stringify({ token: signJwt(alg, claims) });
});

provider.listen(chosen, () => {
  console.log(JSON.stringify({
    message: 'issuer listening',
    issuer,
    port: chosen,
    kids: jwks.keys.map((k) => k.kid),
  }));
});
