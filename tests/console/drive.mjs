// Drives the web console in real headless Chromium against a running control plane + proxy.
// Started by tests/tests/console.rs, which passes everything in the environment:
//   CONSOLE_URL, ADMIN_TOKEN, CHANNEL_OK, CHANNEL_BAD, PROXY_URL, OTHER_TOKEN (a client token named
//   batch-token), VIEWER_TOKEN and OPERATOR_TOKEN (admin tokens with those roles), CHROMIUM,
//   SCREENSHOTS (optional dir).
// A tagged request sent through the proxy is found on the Requests page (request log); a webhook
// made through its page gets a finished trial (a shadow rule expiring), shown delivered there.
// Exits non-zero (with the step that failed) on any failed expectation, console error, page error
// or CSP violation.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import http from 'node:http';

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const base = env('CONSOLE_URL');
const adminToken = env('ADMIN_TOKEN');
const channelOk = env('CHANNEL_OK');
const channelBad = env('CHANNEL_BAD');
const proxyUrl = env('PROXY_URL');
const otherToken = env('OTHER_TOKEN');
const viewerToken = env('VIEWER_TOKEN');
const operatorToken = env('OPERATOR_TOKEN');
const shots = process.env.SCREENSHOTS || '';
const TIMEOUT = 20_000;

const profile = mkdtempSync(join(tmpdir(), 'switchyard-chromium-'));
const problems = [];
let step = 'launch';
const log = (message) => console.log(`[console-test] ${message}`);

// The admin API and the proxy called from node itself (not the page): waiting for the fleet is
// the test's business, not the console's.
const admin = async (method, path, body) => {
  const response = await fetch(`${base}${path}`, {
    method,
    headers: { Authorization: `Bearer ${adminToken}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${await response.text()}`);
  return response.json();
};
/** Every connected proxy holds the newest revision. */
const fleetHolds = async () => {
  const { base_revision: revision } = await admin('POST', '/api/v1/dry-run', { changes: [] });
  await until(`the proxy to hold revision ${revision}`, async () => {
    const proxies = (await admin('GET', '/api/v1/state')).proxies || [];
    return proxies.length > 0 && proxies.every((p) => p.revision >= revision);
  });
  // The control plane lists the revision it sent; the proxy serves from it once installed.
  await until(`the proxy to serve from revision ${revision}`, async () => {
    const page = await (await fetch(`${proxyUrl}/metrics`)).text();
    const line = page.split('\n').find((l) => l.startsWith('switchyard_snapshot_revision '));
    return line !== undefined && Number(line.split(' ')[1]) >= revision;
  });
};
/** Sends `n` chat completions through the proxy with a client token; answers how many were served. */
const send = async (bearer, n) => {
  let ok = 0;
  for (let i = 0; i < n; i += 1) {
    const response = await fetch(`${proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${bearer}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'console-model', messages: [{ role: 'user', content: `hello console ${i}` }] }),
    });
    const text = await response.text();
    if (response.ok) ok += 1;
    else log(`request ${i}: ${response.status} ${text.slice(0, 200)}`);
  }
  return ok;
};
/** Sends one tagged request through the proxy; answers its request id. */
const sendTagged = async (bearer) => {
  const id = `console-req-${Date.now()}`;
  const response = await fetch(`${proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: {
      Authorization: `Bearer ${bearer}`, 'Content-Type': 'application/json',
      'x-request-id': id, 'x-switchyard-tags': 'console-page, env=test',
    },
    body: JSON.stringify({ model: 'console-model', user: 'console-user', messages: [{ role: 'user', content: 'log me' }] }),
  });
  await response.text();
  if (!response.ok) throw new Error(`the tagged request failed: ${response.status}`);
  return id;
};
/** Finds request `id` on the Requests page, filtered by its tag (its row travelled with the usage
 * reports the test has already waited for). */
const requestLogPage = async (page, id) => {
  await until('the tagged request in the request log', async () =>
    (await admin('GET', '/api/v1/requests?tag=console-page')).data.some((r) => r.request_id === id));
  await page.getByRole('link', { name: 'Requests' }).click();
  await page.locator('form[aria-label="Filter requests"] [name="tag"]').fill('console-page');
  await page.getByRole('button', { name: 'Filter' }).click();
  const row = page.locator('table[aria-label="requests"] tbody tr', { hasText: id });
  await row.waitFor();
  const cells = await row.locator('td').allTextContents();
  if (!cells.includes('console-token') || !cells.includes('console-user') || !cells.some((c) => c.includes('env=test'))) {
    problems.push(`request-log row ${cells.join(' | ')}`);
  }
  log(`request ${id} on the Requests page: ${cells.join(' | ')}`);
};
const until = async (what, check, ms = 60_000) => {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
};

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
  await tokenForm.locator('[name="expires_at"]').fill('2099-01-31T23:59:59Z');
  await tokenForm.getByRole('button', { name: 'Preview token' }).click();
  await expectText(tokenForm.locator('.dry-run'), 'Tokens served differently', 'the token create dry run names the token');
  await tokenForm.getByRole('button', { name: 'Save' }).click();
  const plaintext = await page.locator('#new-token code.plaintext').textContent();
  if (!plaintext || plaintext.length < 20) problems.push(`no plaintext token shown: ${plaintext}`);
  await page.getByRole('link', { name: 'Teams' }).click();
  await page.getByRole('link', { name: 'Tokens' }).click();
  await page.locator('table[aria-label="tokens"] tr', { hasText: 'console-token' }).locator('td', { hasText: '2099-01-31T23:59:59' }).waitFor();
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

  step = 'unpriced traffic: the batch token, before any price exists';
  await fleetHolds();
  const unpriced = await send(otherToken, 3);
  if (unpriced < 2) throw new Error(`only ${unpriced} of 3 batch requests were served`);
  // Reported before the price exists, so they stay unpriced.
  await until('the unpriced usage', async () => {
    const usage = await admin('GET', '/api/v1/usage');
    return usage.total.requests === unpriced && usage.total.unpriced_requests === unpriced;
  });

  step = 'prices: create one, its dry run first';
  await page.getByRole('link', { name: 'Prices' }).click();
  const priceForm = page.locator('form[aria-label="Create a price"]');
  await priceForm.locator('[name="channel_id"]').selectOption(channelOk);
  await priceForm.locator('[name="model_pattern"]').fill('model-ok');
  await priceForm.locator('[name="input_per_million"]').fill('30');
  await priceForm.locator('[name="output_per_million"]').fill('60');
  await priceForm.getByRole('button', { name: 'Preview price' }).click();
  const priceDry = priceForm.locator('.dry-run');
  await expectText(priceDry.locator('table[aria-label="price changes"] tr'), 'created', 'the price dry run lists the new price');
  await expectText(priceDry, 'model-ok · input 30, output 60, cached input as input', 'the price dry run shows its terms');
  if ((await admin('GET', '/api/v1/prices')).data.length !== 0) problems.push('a price was saved before Save');
  await shot('prices');
  await priceDry.getByRole('button', { name: 'Save' }).click();
  await page.locator('table[aria-label="prices"] tr', { hasText: 'model-ok' }).locator('td', { hasText: /^60$/ }).waitFor();
  log('price created after its dry run');

  step = 'limits: a spend limit on the token';
  await page.getByRole('link', { name: 'Limits' }).click();
  const limitForm = page.locator('form[aria-label="Create a limit"]');
  const pickScope = async (form, scope, name) => {
    await form.locator('[name="scope"]').selectOption(scope);
    const option = form.locator('[name="scope_id"] option', { hasText: name });
    await form.locator('[name="scope_id"]').selectOption(await option.getAttribute('value'));
  };
  await pickScope(limitForm, 'token', 'console-token');
  await limitForm.locator('[name="metric"]').selectOption('spend');
  await limitForm.locator('[name="window"]').selectOption('day');
  await limitForm.locator('[name="value"]').fill('5');
  await limitForm.getByRole('button', { name: 'Preview limit' }).click();
  const limitDry = limitForm.locator('.dry-run');
  await expectText(limitDry.locator('table[aria-label="limit changes"] tr'), 'created', 'the limit dry run lists the new limit');
  await expectText(limitDry, 'spend 5 USD per day (hard)', 'the limit dry run shows its terms');
  await limitDry.getByRole('button', { name: 'Save' }).click();
  const limitRow = page.locator('table[aria-label="limits"] > tbody > tr', { hasText: 'console-token' });
  await limitRow.locator('td', { hasText: '5 USD' }).waitFor();
  const limitId = (await limitRow.locator('td').first().textContent()).trim();

  step = 'limits: edit the spend limit, its dry run first';
  await page.getByRole('button', { name: `Edit limit ${limitId}` }).click();
  const limitEdit = page.locator(`form[aria-label="Edit limit #${limitId}"]`);
  await limitEdit.locator('[name="value"]').fill('0.02');
  await limitEdit.getByRole('button', { name: 'Preview change' }).click();
  const editDry = limitEdit.locator('.dry-run');
  await expectText(editDry.locator('table[aria-label="limit changes"] tr'), 'changed', 'the limit edit dry run');
  await expectText(editDry, 'spend 0.02 USD per day', 'the limit edit dry run shows the new value');
  await shot('limits');
  await editDry.getByRole('button', { name: 'Save' }).click();
  await page.locator('table[aria-label="limits"] > tbody > tr', { hasText: 'console-token' }).locator('td', { hasText: '0.02 USD' }).waitFor();

  step = 'limits: a request limit on the route, then its delete';
  await pickScope(limitForm, 'route', 'console-model');
  await limitForm.locator('[name="metric"]').selectOption('requests');
  await limitForm.locator('[name="window"]').selectOption('minute');
  await limitForm.locator('[name="value"]').fill('1000');
  await limitForm.locator('[name="mode"]').selectOption('soft');
  await limitForm.getByRole('button', { name: 'Preview limit' }).click();
  await expectText(limitForm.locator('.dry-run'), 'requests 1000 per minute (soft)', 'the request limit dry run');
  await limitForm.locator('.dry-run').getByRole('button', { name: 'Save' }).click();
  const routeLimit = page.locator('table[aria-label="limits"] > tbody > tr', { hasText: 'console-model' });
  await routeLimit.waitFor();
  await routeLimit.getByRole('button', { name: 'Delete' }).click();
  await expectText(routeLimit.locator('.dry-run'), 'deleted', 'the limit delete shows its dry run');
  await routeLimit.getByRole('button', { name: 'Confirm delete' }).click();
  await page.locator('table[aria-label="limits"] > tbody > tr', { hasText: 'console-model' }).waitFor({ state: 'detached' });
  log(`spend limit #${limitId} created and edited, a request limit created and deleted`);

  step = 'priced traffic through the proxy with the new token';
  await fleetHolds();
  const served = await send(plaintext, 6);
  if (served < 5) throw new Error(`only ${served} of 6 requests were served`);
  // Its row in the request log travels with this traffic's usage reports.
  const tagged = await sendTagged(plaintext);
  // The proxy reports usage every few seconds.
  await until('the spend to reach the budget', async () => {
    const budgets = (await admin('GET', '/api/v1/budgets')).data;
    return budgets.some((b) => b.limit_id === Number(limitId) && Number(b.spent_usd) > 0);
  });
  await until('the usage of both tokens', async () => {
    const usage = await admin('GET', '/api/v1/usage?group_by=token');
    return usage.groups.length === 2 && usage.groups.some((g) => g.key === 'console-token' && g.cost_usd !== null)
      && usage.groups.some((g) => g.key === 'batch-token' && g.requests === unpriced);
  });
  log(`${served} priced requests served and the usage reported`);

  step = 'usage: a cost chart with a series, and unpriced shown as unpriced';
  await page.getByRole('link', { name: 'Usage' }).click();
  const chart = page.locator('#usage-chart figure.chart');
  await chart.locator('svg rect.seg[data-series="console-token"]').first().waitFor();
  await expectText(chart.locator('.legend li'), 'console-token', 'the legend names the token');
  await expectText(chart.locator('.legend li'), /batch-token\s*unpriced/, 'the unpriced token is unpriced in the legend');
  if (await chart.locator('svg rect.seg[data-series="batch-token"]').count()) problems.push('an unpriced series drawn as cost');
  // The token's segment stands on the baseline, inside the plot, and is the peak, at least half
  // the plot high (the stylesheet must not resize SVG shapes).
  const geometry = await chart.locator('svg rect.seg[data-series="console-token"]').first().evaluate((rect) => {
    const r = rect.getBoundingClientRect();
    const axis = rect.ownerSVGElement.querySelector('.x-axis line').getBoundingClientRect();
    const plot = [...rect.ownerSVGElement.querySelectorAll('.grid line')].pop().getBoundingClientRect();
    return { height: r.height, bottom: r.bottom, right: r.right, baseline: axis.bottom, end: axis.right, top: plot.top };
  });
  if (Math.abs(geometry.bottom - geometry.baseline) > 2 || geometry.right > geometry.end + 1
    || geometry.height < (geometry.baseline - geometry.top) / 2) problems.push(`chart bar geometry ${JSON.stringify(geometry)}`);
  const cells = async (name) => page.locator('table[aria-label="usage totals"] tbody tr', { hasText: name }).locator('td').allTextContents();
  const usageCells = await cells('console-token');
  if (!(Number(usageCells[5]) > 0) || usageCells[6] !== '0') problems.push(`usage of console-token: ${usageCells}`);
  if (!(Number(usageCells[1]) >= served)) problems.push(`usage requests of console-token: ${usageCells}`);
  const batchCells = await cells('batch-token');
  if (batchCells[5] !== 'unpriced' || batchCells[6] !== String(unpriced)) problems.push(`usage of batch-token: ${batchCells}`);
  await expectText(page.locator('#usage-summary dd'), 'priced requests only', 'a partial total says so');
  log(`usage rows ${usageCells.join(' | ')}; ${batchCells.join(' | ')}`);

  step = 'usage: requests stacked per token, then per channel, then over 7 days';
  await page.locator('#usage-metric').selectOption('requests');
  await expectText(page.locator('#usage-chart h2'), 'Requests per hour by token', 'the requests chart');
  await chart.locator('svg rect.seg[data-series="batch-token"]').first().waitFor();
  await chart.locator('svg rect.seg[data-series="console-token"]').first().waitFor();
  await shot('usage', true);
  await page.locator('#usage-group').selectOption('channel');
  await page.locator('#usage-chart svg rect.seg[data-series="healthy"]').first().waitFor();
  await page.locator('#usage-range').selectOption('7d');
  await expectText(page.locator('#usage-chart h2'), 'Requests per day by channel', 'the 7-day chart is daily');
  await page.locator('#usage-chart svg rect.seg[data-series="healthy"]').first().waitFor();

  step = 'budgets: the spend limit with spent > 0';
  await page.getByRole('link', { name: 'Budgets' }).click();
  const budgetRow = page.locator('table[aria-label="budgets"] tbody tr', { hasText: 'console-token' });
  const spent = (await budgetRow.locator('.spent').textContent()).trim();
  if (!(Number(spent) > 0)) problems.push(`budget spent ${spent}`);
  await budgetRow.locator('.bar').waitFor();
  await expectText(budgetRow.locator('td'), '0.02', 'the budget shows the edited limit');
  await shot('budgets');
  log(`budget: spent ${spent} USD of 0.02, ${await budgetRow.locator('.bar-text').textContent()}`);

  step = 'shadows: a trial rule, its traffic, and the report side by side';
  const rule = await admin('POST', '/api/v1/shadows', {
    name: 'console-trial', model_pattern: 'console-model', target_member_id: Number(badMember), sample_percent: 100, max_rps: 100,
  });
  await fleetHolds();
  const shadowed = await send(plaintext, 3);
  if (shadowed < 1) throw new Error('no request was served under the shadow rule');
  const expected = await until('the shadow pairs to reach the report', async () => {
    const r = await admin('GET', `/api/v1/shadows/${rule.id}/report`);
    return r.pairs >= shadowed ? r : null;
  });
  await page.getByRole('link', { name: 'Shadows' }).click();
  await page.getByRole('link', { name: 'console-trial' }).click();
  const sideBySide = page.locator('table[aria-label="live and shadow"]');
  await sideBySide.waitFor();
  const figures = async (name) => sideBySide.locator('tbody tr', { hasText: name }).first().locator('td').allTextContents();
  const requests = await figures('requests');
  if (requests[1] !== String(expected.live.requests) || requests[2] !== String(expected.shadow_side.requests)) {
    problems.push(`shadow report requests ${requests} vs the API's ${expected.live.requests}/${expected.shadow_side.requests}`);
  }
  const rate = (value) => (value === null ? '—' : `${(value * 100).toFixed(1)} %`);
  const success = await figures('success rate');
  if (success[1] !== rate(expected.live.success_rate) || success[2] !== rate(expected.shadow_side.success_rate)) {
    problems.push(`shadow report success rates ${success} vs the API's ${expected.live.success_rate}/${expected.shadow_side.success_rate}`);
  }
  await page.locator('table[aria-label="agreement"]').waitFor();
  await shot('shadow-report', true);
  log(`shadow report: ${expected.pairs} pairs, success live ${success[1]} / shadow ${success[2]}`);

  step = 'cache: a rule made in the page, two identical requests, the hit counted on the page';
  await page.getByRole('link', { name: 'Cache' }).click();
  const cacheForm = page.locator('form[aria-label="Create a cache rule"]');
  await cacheForm.locator('[name="name"]').fill('console-cache');
  await cacheForm.locator('[name="model_pattern"]').fill('console-model');
  await cacheForm.locator('[name="endpoints"]').fill('chat_completions');
  await cacheForm.locator('[name="ttl_seconds"]').fill('600');
  await cacheForm.locator('[name="scope"]').selectOption('route');
  await cacheForm.getByRole('button', { name: 'Preview rule' }).click();
  await cacheForm.locator('.dry-run').waitFor();
  if ((await admin('GET', '/api/v1/cache_rules')).data.length !== 0) problems.push('a cache rule was saved before Save');
  await cacheForm.locator('.dry-run').getByRole('button', { name: 'Save' }).click();
  await page.locator('table[aria-label="cache rules"] tr', { hasText: 'console-cache' }).locator('td', { hasText: /^600$/ }).waitFor();
  // A token of its own: the other tokens' usage is checked above and below.
  const cacheToken = (await admin('POST', '/api/v1/tokens', { name: 'cache-token' })).token;
  await fleetHolds();
  const marks = [];
  for (let i = 0; i < 6 && !marks.includes('hit'); i += 1) {
    const response = await fetch(`${proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${cacheToken}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'console-model', messages: [{ role: 'user', content: 'the same question' }] }),
    });
    await response.text();
    marks.push(response.ok ? response.headers.get('x-switchyard-cache') : `status ${response.status}`);
  }
  if (!marks.includes('hit')) throw new Error(`no identical request was a hit: ${marks}`);
  const hitsRow = page.locator('table[aria-label="cache by route"] tbody tr', { hasText: 'console-model' });
  // The page refreshes its figures by itself once the proxy has reported the hit.
  await hitsRow.locator('.hits', { hasText: /^[1-9]\d*$/ }).waitFor({ timeout: 60_000 });
  const hitCells = await hitsRow.locator('td').allTextContents();
  if (!hitCells[3].includes('%') || hitCells[3].startsWith('0.0')) problems.push(`cache hit rate ${hitCells}`);
  await expectText(page.locator('#cache-summary dd.hits'), /^[1-9]/, 'the summary counts the hit');
  await shot('cache', true);
  log(`cache: requests ${marks.join(', ')}; row ${hitCells.join(' | ')}`);

  step = 'guardrails: a shadow rule listed with its mode, its report counting what it would have blocked, masked';
  const guard = await admin('POST', '/api/v1/guardrails', {
    name: 'console-pii', stage: 'request', action: 'block', mode: 'shadow',
    checks: { detectors: ['email'] },
  });
  const guardToken = (await admin('POST', '/api/v1/tokens', { name: 'guard-token' })).token;
  await fleetHolds();
  const guarded = await fetch(`${proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${guardToken}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'console-model', messages: [{ role: 'user', content: 'mail jane.doe@example.com' }] }),
  });
  await guarded.text();
  if (!guarded.ok) problems.push(`a shadow guardrail changed the answer: status ${guarded.status}`);
  await until('the guardrail report', async () => (await admin('GET', `/api/v1/guardrails/${guard.id}/report`)).would_block >= 1);
  await page.getByRole('link', { name: 'Guardrails' }).click();
  const guardRow = page.locator('table[aria-label="guardrails"] tbody tr', { hasText: 'console-pii' });
  await expectText(guardRow, 'reports (would block)', 'the rule list says a shadow rule only reports');
  await guardRow.getByRole('link', { name: 'console-pii' }).click();
  await expectText(page.locator('#guardrail-counts dd.would-block'), /^[1-9]/, 'the report counts what it would have blocked');
  await expectText(page.locator('table[aria-label="guardrail findings"]'), 'EMAIL', 'the report names the finding kind');
  const examples = await page.locator('#guardrail-examples li').allTextContents();
  if (!examples.some((e) => e.includes('***')) || examples.some((e) => e.includes('jane.doe'))) {
    problems.push(`guardrail examples are not masked: ${examples}`);
  }
  await shot('guardrails', true);
  log(`guardrails: examples ${examples.join(', ')}`);

  step = 'requests: a tagged request the test sent appears on the Requests page';
  await requestLogPage(page, tagged);

  step = 'prices: edit one, create and delete another, each after its dry run';
  await page.getByRole('link', { name: 'Prices' }).click();
  const priceRow = page.locator('table[aria-label="prices"] > tbody > tr', { hasText: 'model-ok' });
  const priceId = (await priceRow.locator('td').first().textContent()).trim();
  await page.getByRole('button', { name: `Edit price ${priceId}` }).click();
  const priceEdit = page.locator(`form[aria-label="Edit price #${priceId}"]`);
  await priceEdit.locator('[name="cached_input_per_million"]').fill('15');
  await priceEdit.getByRole('button', { name: 'Preview change' }).click();
  await expectText(priceEdit.locator('.dry-run tr'), 'cached input as input', 'the price edit dry run: before');
  await expectText(priceEdit.locator('.dry-run tr'), 'cached input 15', 'the price edit dry run: after');
  await priceEdit.locator('.dry-run').getByRole('button', { name: 'Save' }).click();
  await page.locator('table[aria-label="prices"] > tbody > tr', { hasText: 'model-ok' }).locator('td', { hasText: /^15$/ }).waitFor();
  await priceForm.locator('[name="channel_id"]').selectOption(channelBad);
  await priceForm.locator('[name="model_pattern"]').fill('*');
  await priceForm.locator('[name="input_per_million"]').fill('1');
  await priceForm.locator('[name="output_per_million"]').fill('2');
  await priceForm.getByRole('button', { name: 'Preview price' }).click();
  await priceForm.locator('.dry-run').getByRole('button', { name: 'Save' }).click();
  const wildcard = page.locator('table[aria-label="prices"] > tbody > tr', { hasText: '*' });
  await wildcard.getByRole('button', { name: 'Delete' }).click();
  await expectText(wildcard.locator('.dry-run tr'), 'deleted', 'the price delete shows its dry run');
  await wildcard.getByRole('button', { name: 'Confirm delete' }).click();
  await page.locator('table[aria-label="prices"] > tbody > tr', { hasText: '*' }).waitFor({ state: 'detached' });

  step = 'limits: a concurrency limit on a member has no window';
  await page.getByRole('link', { name: 'Limits' }).click();
  await pickScope(limitForm, 'member', 'model-bad');
  await limitForm.locator('[name="metric"]').selectOption('concurrent');
  await limitForm.locator('[name="window"]').selectOption('');
  await limitForm.locator('[name="value"]').fill('4');
  await limitForm.getByRole('button', { name: 'Preview limit' }).click();
  await expectText(limitForm.locator('.dry-run'), 'concurrent 4 (hard)', 'the concurrency limit dry run');
  await limitForm.locator('.dry-run').getByRole('button', { name: 'Save' }).click();
  await page.locator('table[aria-label="limits"] > tbody > tr', { hasText: 'model-bad' }).locator('td', { hasText: 'concurrent' }).waitFor();
  log('prices edited, created and deleted; a concurrency limit created');

  step = 'webhooks: a target created through the form gets a finished trial, shown delivered';
  const received = [];
  const receiver = http.createServer((req, res) => {
    let body = '';
    req.on('data', (chunk) => { body += chunk; });
    req.on('end', () => { received.push({ headers: req.headers, body }); res.statusCode = 204; res.end(); });
  });
  await new Promise((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  try {
    const hookUrl = `http://127.0.0.1:${receiver.address().port}/hook/console-path`;
    await page.getByRole('link', { name: 'Webhooks' }).click();
    const hookForm = page.locator('form[aria-label="Create a webhook"]');
    await hookForm.locator('[name="name"]').fill('console-hook');
    await hookForm.locator('[name="url"]').fill(hookUrl);
    await hookForm.locator('[name="events"]').fill('trial_finished');
    await hookForm.locator('[name="secret"]').fill('whsec-console-0123456789');
    await hookForm.getByRole('button', { name: 'Preview webhook' }).click();
    await hookForm.locator('.dry-run').waitFor();
    if ((await admin('GET', '/api/v1/webhooks')).data.length !== 0) problems.push('a webhook was saved before Save');
    await hookForm.locator('.dry-run').getByRole('button', { name: 'Save' }).click();
    const hookRow = page.locator('table[aria-label="webhooks"] > tbody > tr', { hasText: 'console-hook' });
    await hookRow.locator('td', { hasText: 'trial_finished' }).waitFor();
    const listed = await page.locator('main').textContent();
    if (listed.includes('whsec-console')) problems.push('a webhook secret is shown');
    if (listed.includes('console-path')) problems.push("a webhook URL's path is shown");
    const hookId = (await admin('GET', '/api/v1/webhooks')).data[0].id;
    // A trial that finishes by itself: a shadow rule that expires in a few seconds.
    const expires = new Date(Date.now() + 1500).toISOString().replace(/\.\d{3}Z$/, 'Z');
    await admin('POST', '/api/v1/shadows', {
      name: 'console-shadow', model_pattern: 'no-such-model', target_channel_id: Number(channelOk),
      target_model: 'model-ok', sample_percent: 1, max_rps: 1, expires_at: expires,
    });
    await until('the finished trial delivered to the webhook', async () => {
      const list = await admin('GET', `/api/v1/webhooks/${hookId}/deliveries`);
      return received.length > 0 && list.data.some((d) => d.state === 'delivered');
    });
    if (!received[0].headers['x-switchyard-signature']) problems.push('a delivery came unsigned');
    await hookRow.getByRole('link', { name: 'console-hook' }).click();
    const delivery = page.locator('table[aria-label="deliveries"] tbody tr', { hasText: 'trial_finished' });
    await delivery.locator('td', { hasText: /^delivered$/ }).waitFor();
    await expectText(delivery, 'console-shadow', 'the delivery says which trial finished');
    await shot('webhooks');
    await page.getByRole('link', { name: 'All webhooks' }).click();
    await hookRow.getByRole('button', { name: 'Delete' }).click();
    await expectText(hookRow.locator('.dry-run'), 'Dry run of this delete', 'the webhook delete shows its dry run');
    await hookRow.getByRole('button', { name: 'Confirm delete' }).click();
    await page.locator('table[aria-label="webhooks"] > tbody > tr', { hasText: 'console-hook' }).waitFor({ state: 'detached' });
    log(`webhook created, its delivery shown delivered (${received.length} received), then deleted`);
  } finally {
    receiver.close();
  }

  step = 'roles: sign in as a viewer';
  const signInAs = async (bearer, label) => {
    await page.locator('#sign-out').click();
    await page.getByLabel('Admin token').fill(bearer);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expectText(page.locator('#whoami'), label, `signed in as ${label}`);
  };
  const visible = async (locator) => (await locator.count()) > 0 && locator.first().isVisible();
  await signInAs(viewerToken, 'console-viewer (viewer)');
  await page.getByRole('link', { name: 'Routes' }).click();
  await page.locator('table[aria-label="routes"]').waitFor();
  if (await visible(page.locator('form[aria-label="Create a route"]'))) problems.push('a viewer sees the route create form');
  await page.getByRole('link', { name: 'console-model' }).click();
  await page.locator('h2', { hasText: 'Route console-model' }).waitFor();
  await page.locator('table[aria-label="members"]').waitFor();
  // Exact names, and the prefixes of the member rows' labelled buttons ("Edit member 3").
  for (const [name, exact] of [['Preview change', true], ['Save', true], ['Delete route', true],
    ['Preview member', true], ['Delete', true], ['Trial call through member', false], ['Edit member', false]]) {
    if (await visible(page.getByRole('button', { name, exact }))) problems.push(`a viewer sees the "${name}" button`);
  }
  if (!(await page.locator('form[aria-label="Edit route"] [name="model_pattern"]').isDisabled())) problems.push('a viewer can type into the route form');
  await page.getByRole('link', { name: 'Settings' }).click();
  await page.locator('h2', { hasText: 'Global settings' }).waitFor();
  if (await visible(page.getByRole('button', { name: 'Preview change' }))) problems.push('a viewer may preview a settings change');
  await page.getByRole('link', { name: 'Cache' }).click();
  await page.locator('table[aria-label="cache rules"]').waitFor();
  for (const name of ['Preview rule', 'Edit cache rule', 'Delete']) {
    if (await visible(page.getByRole('button', { name }))) problems.push(`a viewer sees the cache page's "${name}" button`);
  }
  await shot('viewer-route');
  log('a viewer sees values and no write control');

  step = 'roles: sign in as an operator';
  await signInAs(operatorToken, 'console-operator (operator)');
  await page.getByRole('link', { name: 'Routes' }).click();
  await page.getByRole('link', { name: 'console-model' }).click();
  await page.locator('h2', { hasText: 'Route console-model' }).waitFor();
  await page.locator('table[aria-label="members"]').waitFor();
  if (!(await visible(page.getByRole('button', { name: 'Trial call' })))) problems.push('an operator cannot make a trial call');
  await page.getByRole('button', { name: 'Delete route' }).click();
  await expectText(page.locator('.dry-run'), 'Deleting needs the admin role', 'an operator sees the dry run of a delete');
  if (await visible(page.getByRole('button', { name: 'Confirm delete' }))) problems.push('an operator may confirm a delete');
  log('an operator dry-runs and makes trial calls, and cannot save');
  await signInAs(adminToken, 'bootstrap (admin)');

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
