// Drives the web console in real headless Chromium against a running control plane + proxy.
// Started by tests/tests/console.rs, which passes everything in the environment:
//   CONSOLE_URL, ADMIN_TOKEN, CHANNEL_OK, CHANNEL_BAD, CHROMIUM, SCREENSHOTS (optional dir).
// Exits non-zero (with the step that failed) on any failed expectation, console error, page error
// or CSP violation.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const base = env('CONSOLE_URL');
const adminToken = env('ADMIN_TOKEN');
const channelOk = env('CHANNEL_OK');
const channelBad = env('CHANNEL_BAD');
const shots = process.env.SCREENSHOTS || '';
const TIMEOUT = 20_000;

const profile = mkdtempSync(join(tmpdir(), 'switchyard-chromium-'));
const problems = [];
let step = 'launch';
const log = (message) => console.log(`[console-test] ${message}`);

// A fresh profile directory every run (playwright passes it to Chromium as --user-data-dir).
const context = await chromium.launchPersistentContext(profile, {
  executablePath: env('CHROMIUM'),
  headless: true,
  viewport: { width: 1366, height: 900 },
  args: [
    '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
  ],
});

try {
  const page = context.pages()[0] || await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  page.on('console', (msg) => { if (msg.type() === 'error') problems.push(`console error: ${msg.text()}`); });
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('requestfailed', (request) => problems.push(`request failed: ${request.url()} ${request.failure()?.errorText}`));
  // Anything not served by the control plane itself would be an external dependency.
  page.on('request', (request) => {
    if (!request.url().startsWith(base)) problems.push(`external request: ${request.url()}`);
  });
  const shot = async (name, fullPage = false) => {
    if (!shots) return;
    mkdirSync(shots, { recursive: true });
    await page.screenshot({ path: join(shots, `${name}.png`), fullPage });
  };
  const expectText = async (locator, text, what) => {
    step = what;
    await locator.filter({ hasText: text }).first().waitFor({ state: 'visible' });
  };

  step = 'open the console';
  const response = await page.goto(`${base}/console`);
  const csp = response.headers()['content-security-policy'] || '';
  if (!csp.includes("script-src 'self'") || csp.includes('unsafe-inline')) problems.push(`weak CSP: ${csp}`);

  step = 'sign in with a wrong token';
  await page.getByLabel('Admin token').fill('wrong-token-0123456789');
  await page.keyboard.press('Enter');
  await expectText(page.locator('#sign-in-error'), 'not accepted', 'a wrong token is refused');
  // The refusal is an expected 401; it is not a console problem.
  for (let i = problems.length - 1; i >= 0; i -= 1) if (problems[i].includes('401')) problems.splice(i, 1);

  step = 'sign in';
  await page.getByLabel('Admin token').fill(adminToken);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.locator('nav#nav').waitFor({ state: 'visible' });
  const stored = await page.evaluate(() => [sessionStorage.length, localStorage.length, document.cookie]);
  if (stored[0] !== 1 || stored[1] !== 0 || stored[2] !== '') problems.push(`token storage: ${JSON.stringify(stored)}`);
  log('signed in');

  step = 'create a route';
  await page.getByRole('link', { name: 'Routes' }).click();
  const create = page.locator('form[aria-label="Create a route"]');
  await create.locator('[name="model_pattern"]').fill('console-model');
  await create.getByRole('button', { name: 'Preview route' }).click();
  await expectText(create.locator('.dry-run'), 'console-model', 'the route create shows its dry run');
  await create.getByRole('button', { name: 'Save' }).click();
  await page.locator('h2', { hasText: 'Route console-model' }).waitFor();
  log('route created');

  const addMember = async (channel, model) => {
    step = `add member ${model}`;
    const form = page.locator('form[aria-label="Add a member"]');
    await form.locator('[name="channel_id"]').selectOption(channel);
    await form.locator('[name="upstream_model"]').fill(model);
    await form.getByRole('button', { name: 'Preview member' }).click();
    await form.locator('.dry-run').waitFor();
    await form.getByRole('button', { name: 'Save' }).click();
    await page.locator('table[aria-label="members"] td', { hasText: model }).waitFor();
  };
  step = 'a validation error is shown at its field';
  {
    const form = page.locator('form[aria-label="Add a member"]');
    await form.locator('[name="channel_id"]').selectOption(channelOk);
    await form.locator('[name="upstream_model"]').fill('x');
    await form.locator('[name="weight"]').fill('-2');
    await form.getByRole('button', { name: 'Preview member' }).click();
    await expectText(form.locator('[data-field="weight"] .field-error'), 'weight', 'the weight error sits at the weight field');
    if ((await form.locator('[name="weight"]').getAttribute('aria-invalid')) !== 'true') problems.push('weight not marked invalid');
    await form.locator('[name="weight"]').fill('1');
    // Chromium logs the deliberate 422 as a failed resource load; it is not a console problem.
    for (let i = problems.length - 1; i >= 0; i -= 1) if (problems[i].includes('status of 422')) problems.splice(i, 1);
  }
  await addMember(channelOk, 'model-ok');
  await addMember(channelBad, 'model-bad');
  await shot('routes');
  log('two members added');

  const memberIds = await page.locator('table[aria-label="members"] tbody tr td:first-child').allTextContents();
  if (memberIds.length !== 2) throw new Error(`expected 2 members, got ${memberIds}`);
  const [okMember, badMember] = memberIds;

  step = 'explain the route';
  await page.getByRole('link', { name: 'Explain this route' }).click();
  const candidates = page.locator('table[aria-label="candidates"]');
  await candidates.waitFor();
  const bars = await candidates.locator('.bar-text').allTextContents();
  if (JSON.stringify(bars) !== JSON.stringify(['50.0%', '50.0%'])) throw new Error(`explain probabilities ${bars}`);
  await shot('explain', true);
  log(`explain probabilities ${bars}`);

  step = 'edit a weight, see the dry run, save';
  await page.goBack();
  await page.getByRole('button', { name: `Edit member ${okMember}` }).click();
  const edit = page.locator(`form[aria-label="Edit member #${okMember}"]`);
  await edit.locator('[name="weight"]').fill('3');
  await edit.getByRole('button', { name: 'Preview change' }).click();
  const dry = edit.locator('.dry-run');
  await dry.waitFor();
  const after = await dry.locator('table tbody tr').first().locator('td').nth(4).textContent();
  if (!after.includes('75.0%')) throw new Error(`dry run after-probability of member ${okMember}: ${after}`);
  await expectText(dry, '1 selection would change', 'the dry run summary');
  await shot('dry-run');
  // Nothing is saved yet: the API still has weight 1.
  const before = await page.evaluate(async (id) => (await (await fetch(`/api/v1/members/${id}`, { headers: { Authorization: `Bearer ${sessionStorage.getItem('switchyard.admin_token')}` } })).json()).weight, okMember);
  if (before !== 1) problems.push(`the weight changed before Save: ${before}`);
  await dry.getByRole('button', { name: 'Save' }).click();
  await page.locator('table[aria-label="members"] tr', { hasText: 'model-ok' }).locator('td', { hasText: /^3$/ }).waitFor();
  log('weight saved after its dry run');

  step = 'a failing trial call';
  await page.getByRole('button', { name: `Trial call through member ${badMember}` }).click();
  await expectText(page.locator('.trial'), 'failed', 'the trial call reports its failure');
  log(await page.locator('.trial').textContent());

  step = 'the cooldown appears in the live state';
  await page.getByRole('link', { name: 'Live state' }).click();
  const cooldowns = page.locator('table[aria-label="cooldowns"]');
  await cooldowns.locator('td', { hasText: `#${badMember}` }).waitFor();
  await cooldowns.locator('.countdown', { hasText: / s$/ }).first().waitFor();
  // The proxy introduced itself (host:pid) and holds a revision.
  await page.locator('table[aria-label="connected proxies"] td', { hasText: /:\d+$/ }).first().waitFor();
  await shot('live');
  log('cooldown and connected proxy shown');

  step = 'channels: credentials masked, status events';
  await page.getByRole('link', { name: 'Channels' }).click();
  await page.getByRole('link', { name: 'healthy' }).click();
  const credForm = page.locator('form[aria-label="Add a credential"]');
  await credForm.locator('[name="secret"]').fill('sk-console-secret-0123456789');
  await credForm.getByRole('button', { name: 'Preview credential' }).click();
  await credForm.locator('.dry-run').waitFor();
  await credForm.getByRole('button', { name: 'Save' }).click();
  const credRow = page.locator('table[aria-label="credentials"] tbody tr').first();
  await credRow.waitFor();
  const shown = await page.locator('main').textContent();
  if (shown.includes('sk-console-secret-0123456789')) problems.push('a credential secret is shown in clear');
  await page.locator('table[aria-label="status events"] td', { hasText: 'created' }).first().waitFor();

  step = 'tokens: the plaintext is shown once';
  await page.getByRole('link', { name: 'Tokens' }).click();
  const tokenForm = page.locator('form[aria-label="Create a token"]');
  await tokenForm.locator('[name="name"]').fill('console-token');
  await tokenForm.getByRole('button', { name: 'Preview token' }).click();
  await expectText(tokenForm.locator('.dry-run'), 'Tokens served differently', 'the token create dry run names the token');
  await tokenForm.getByRole('button', { name: 'Save' }).click();
  const plaintext = await page.locator('#new-token code.plaintext').textContent();
  if (!plaintext || plaintext.length < 20) problems.push(`no plaintext token shown: ${plaintext}`);
  await page.getByRole('link', { name: 'Teams' }).click();
  await page.getByRole('link', { name: 'Tokens' }).click();
  await page.locator('table[aria-label="tokens"] td', { hasText: 'console-token' }).waitFor();
  if ((await page.locator('main').textContent()).includes(plaintext)) problems.push('the token plaintext is shown again');

  step = 'teams and settings';
  await page.getByRole('link', { name: 'Teams' }).click();
  const teamForm = page.locator('form[aria-label="Create a team"]');
  await teamForm.locator('[name="name"]').fill('console-team');
  await teamForm.locator('[name="models"]').fill('console-*');
  await teamForm.getByRole('button', { name: 'Preview change' }).click();
  await teamForm.locator('.dry-run').waitFor();
  await teamForm.getByRole('button', { name: 'Save' }).click();
  await page.locator('table[aria-label="teams"] td', { hasText: 'console-team' }).waitFor();
  await page.getByRole('link', { name: 'Settings' }).click();
  const settingsForm = page.locator('form[aria-label="Edit settings"]');
  await settingsForm.locator('[name="retry_times"]').fill('1000');
  await settingsForm.getByRole('button', { name: 'Preview change' }).click();
  await expectText(settingsForm.locator('[data-field="retry_times"] .field-error'), 'retry_times', 'an out-of-range setting is shown at its field');
  for (let i = problems.length - 1; i >= 0; i -= 1) if (problems[i].includes('status of 422')) problems.splice(i, 1);
  log('channels, tokens, teams and settings views work');

  step = 'keyboard: tab reaches the navigation';
  await page.keyboard.press('Tab');
  const focused = await page.evaluate(() => document.activeElement && document.activeElement.tagName);
  if (!focused || focused === 'BODY') problems.push('Tab moved focus nowhere');

  step = 'done';
} catch (error) {
  problems.push(`step "${step}": ${error.message.split('\n')[0]}`);
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}

if (problems.length) {
  for (const p of problems) console.error(`[console-test] PROBLEM ${p}`);
  process.exit(1);
}
log('all console checks passed');
