// Signs in to the web console through single sign-on in real headless Chromium: the console's
// button, the OpenID provider's own login page (tests/console/issuer.mjs), the callback, the
// session cookie. Started by tests/tests/sso.rs with, in the environment:
//   CONSOLE_URL, CHROMIUM.
// Each person signs in in a fresh browser context (the provider remembers who signed in last):
//   - admin@example.com (group switchyard-admins → admin) creates a team through the Teams form
//     (its dry run and its save are writes made with the session cookie and the CSRF header);
//     a write with the cookie but without the header is refused (403 csrf_token_invalid); the
//     cookie is HttpOnly, Secure and SameSite=Strict; signing out ends the session server-side.
//   - viewer@example.com (switchyard-viewers → viewer) sees no write control, and a write made
//     from the page anyway gets 403 insufficient_role.
//   - nobody@example.com (no mapped group) gets 403 no_mapped_role at the callback, no session.
// Prints one JSON line {"message":"sso checks passed","team":NAME} at the end; exits non-zero
// naming every failed expectation, console error or CSP violation on the console's pages.
import { chromium } from 'playwright-core';

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const base = env('CONSOLE_URL');
const TIMEOUT = 20_000;
const problems = [];
let step = 'launch';
const log = (message) => console.error(`[sso-test] ${message}`);

const browser = await chromium.launch({
  executablePath: env('CHROMIUM'),
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
});

/** A fresh context and page, watched for console errors and CSP violations on our pages. */
async function freshPage() {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  page.on('console', (msg) => {
    // The console's own pages only (the callback's refusal is a JSON answer, not a page of ours).
    const ours = page.url().startsWith(base) && !page.url().startsWith(`${base}/console/sso/`);
    if (msg.type() === 'error' && ours && !/status of 40[13]/.test(msg.text())) {
      problems.push(`console error on ${page.url()}: ${msg.text()}`);
    }
  });
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  return { context, page };
}

/** From the console's sign-in page through the provider's login page back to the callback. */
async function signIn(page, login) {
  step = `${login}: open the console`;
  await page.goto(`${base}/console/`);
  step = `${login}: the single sign-on button`;
  await page.getByRole('link', { name: 'Sign in with single sign-on' }).click();
  step = `${login}: the provider's login page`;
  await page.locator('input[name="login"]').fill(login);
  await page.locator('input[name="password"]').fill('any-password');
  await page.locator('button[type="submit"]').click();
}

/** A call made from the page (same origin: the browser adds the session cookie). */
const fromPage = (page, method, path, headers = {}, body = undefined) => page.evaluate(
  async ([m, p, h, b]) => {
    const response = await fetch(p, {
      method: m,
      headers: { 'Content-Type': 'application/json', ...h },
      body: b === undefined ? undefined : JSON.stringify(b),
    });
    return { status: response.status, body: await response.json().catch(() => null) };
  },
  [method, path, headers, body],
);

const visible = async (locator) => (await locator.count()) > 0 && locator.first().isVisible();
const team = `sso-team-${Date.now()}`;

try {
  // ---- an admin
  let { context, page } = await freshPage();
  await signIn(page, 'admin@example.com');
  step = 'admin: signed in';
  await page.locator('#whoami', { hasText: 'admin@example.com (admin)' }).waitFor();
  const cookies = await context.cookies(base);
  const session = cookies.find((c) => c.name === 'switchyard-session');
  if (!session) problems.push(`no session cookie: ${JSON.stringify(cookies.map((c) => c.name))}`);
  else if (!session.httpOnly || !session.secure || session.sameSite !== 'Strict') {
    problems.push(`session cookie attributes: ${JSON.stringify(session)}`);
  }
  if (await page.evaluate(() => document.cookie.includes('switchyard-session'))) {
    problems.push('the session cookie is readable from script');
  }
  step = 'admin: create a team through the form';
  await page.goto(`${base}/console/#/teams`);
  const form = page.locator('form[aria-label="Create a team"]');
  await form.locator('[name="name"]').fill(team);
  await form.getByRole('button', { name: 'Preview change' }).click();
  await page.getByRole('button', { name: 'Save' }).click();
  await page.locator('h2', { hasText: `Team ${team}` }).waitFor();
  log(`admin created team ${team} through the console`);

  step = 'admin: a cookie write without the CSRF header';
  const forged = await fromPage(page, 'POST', '/api/v1/teams', {}, { name: `${team}-forged` });
  if (forged.status !== 403 || forged.body?.error?.code !== 'csrf_token_invalid') {
    problems.push(`a cookie write without the CSRF header: ${JSON.stringify(forged)}`);
  }
  const wrong = await fromPage(page, 'POST', '/api/v1/teams', { 'x-switchyard-csrf': 'f'.repeat(64) }, { name: `${team}-wrong` });
  if (wrong.status !== 403) problems.push(`a cookie write with a wrong CSRF token: ${JSON.stringify(wrong)}`);

  step = 'admin: sign out';
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByRole('link', { name: 'Sign in with single sign-on' }).waitFor();
  if (session) {
    // The old cookie, presented again, finds no session: it ended on the server, not only here.
    const again = await fetch(`${base}/api/v1/whoami`, { headers: { Cookie: `switchyard-session=${session.value}` } });
    if (again.status !== 401) problems.push(`the signed-out session still answers: ${again.status}`);
  }
  await context.close();

  // ---- a viewer
  ({ context, page } = await freshPage());
  await signIn(page, 'viewer@example.com');
  step = 'viewer: signed in';
  await page.locator('#whoami', { hasText: 'viewer@example.com (viewer)' }).waitFor();
  await page.goto(`${base}/console/#/teams`);
  await page.locator('table[aria-label="teams"]').waitFor();
  await page.getByRole('link', { name: team, exact: true }).waitFor();
  if (await visible(page.getByRole('button', { name: 'Preview change' }))) problems.push('a viewer sees a write control');
  const me = await fromPage(page, 'GET', '/api/v1/whoami');
  const denied = await fromPage(page, 'POST', '/api/v1/teams', { 'x-switchyard-csrf': me.body?.csrf_token }, { name: `${team}-viewer` });
  if (denied.status !== 403 || denied.body?.error?.code !== 'insufficient_role') {
    problems.push(`a viewer's write: ${JSON.stringify(denied)}`);
  }
  log('a viewer sees the teams and no write control; a write is refused');
  await context.close();

  // ---- someone whose groups map to no role
  ({ context, page } = await freshPage());
  await signIn(page, 'nobody@example.com');
  step = 'nobody: refused at the callback';
  await page.waitForURL(/\/console\/sso\/callback/);
  const refusal = await page.locator('body').textContent();
  if (!refusal.includes('no_mapped_role') || !refusal.includes('nobody@example.com')) {
    problems.push(`the unmapped person's answer: ${refusal.slice(0, 300)}`);
  }
  if ((await context.cookies(base)).some((c) => c.name === 'switchyard-session')) {
    problems.push('an unmapped person got a session cookie');
  }
  log('a person without a mapped group is refused with a clear message');
  await context.close();
  step = 'done';
} catch (error) {
  problems.push(`step "${step}": ${error.message.split('\n')[0]}`);
} finally {
  await browser.close();
}

if (problems.length) {
  for (const p of problems) console.error(`[sso-test] PROBLEM ${p}`);
  process.exit(1);
}
console.log(JSON.stringify({ message: 'sso checks passed', team }));
