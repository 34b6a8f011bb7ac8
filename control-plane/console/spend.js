// Usage, budgets, limits and prices: what the fleet served and spent, and the rules that price
// and cap it. Costs are the API's exact decimal strings wherever they are shown as figures; only
// the chart turns them into numbers to draw. A cost the API gives as null is "unpriced" (no price
// matched), never 0.
import { api, all, needs, teamOnly } from './api.js';
import { h, clear, table, fmt, bar } from './dom.js';
import { stackedBars, MAX_SERIES } from './chart.js';
import { editForm, deleteButton, section, heading, options } from './views.js';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

const RANGES = {
  '24h': { label: 'Last 24 hours', bucket: 'hour', unit: HOUR, count: 24 },
  '7d': { label: 'Last 7 days', bucket: 'day', unit: DAY, count: 7 },
  '30d': { label: 'Last 30 days', bucket: 'day', unit: DAY, count: 30 },
};
const DIMENSIONS = [['token', 'token'], ['team', 'team'], ['route', 'route'], ['channel', 'channel'], ['model', 'upstream model']];
const METRICS = [['cost', 'cost (USD)'], ['requests', 'requests']];

/** An API instant (microseconds, UTC) as Unix ms. */
function instant(text) {
  return Date.parse(String(text).replace(/(\.\d{3})\d+/, '$1'));
}

/** A cost figure for the chart: at most 8 decimals, no trailing zeros, never an exponent. */
function usd(value) {
  return value.toFixed(8).replace(/\.?0+$/, '') || '0';
}

/** A cost as the API gives it: its exact decimal string, or "unpriced" for null. */
function cost(text) {
  return text === null || text === undefined ? h('span.unpriced', 'unpriced') : text;
}

function groupName(dimension, key) {
  if (key) return key;
  return dimension === 'team' ? '(no team)' : '(none)';
}

function bucketLabel(ms, bucket) {
  const d = new Date(ms);
  const day = d.toLocaleDateString('en', { month: 'short', day: 'numeric', timeZone: 'UTC' });
  if (bucket === 'day') return { label: day, title: `${day} (UTC)` };
  const hour = `${String(d.getUTCHours()).padStart(2, '0')}:00`;
  return { label: hour, title: `${day} ${hour} UTC` };
}

function when(text) {
  const ms = instant(text);
  if (!Number.isFinite(ms)) return fmt(text);
  const left = ms - Date.now();
  const mins = Math.round(Math.abs(left) / 60_000);
  const span = mins >= 60 * 24 ? `${Math.floor(mins / 1440)} d ${Math.floor((mins % 1440) / 60)} h`
    : mins >= 60 ? `${Math.floor(mins / 60)} h ${mins % 60} min` : `${mins} min`;
  return h('span', { title: text }, new Date(ms).toLocaleString(), h('small.help', left >= 0 ? ` (in ${span})` : ` (${span} ago)`));
}

// ---------------------------------------------------------------- usage

export async function usage(root, params) {
  heading(root, 'Usage');
  const range = RANGES[params.range] ? params.range : '24h';
  const dimension = DIMENSIONS.some(([d]) => d === params.group) ? params.group : 'token';
  const metric = params.metric === 'requests' ? 'requests' : 'cost';
  const { bucket, unit, count } = RANGES[range];
  const start = Math.floor(Date.now() / unit) * unit - (count - 1) * unit;
  const from = new Date(start).toISOString();
  const to = new Date(start + count * unit).toISOString();

  const go = (changes) => {
    const q = new URLSearchParams({ range, group: dimension, metric, ...changes, t: String(Date.now()) });
    location.hash = `#/usage?${q}`;
  };
  const picker = (name, label, list, value) => {
    const id = `usage-${name}`;
    const select = h('select', { id, name }, options(list, value));
    select.addEventListener('change', () => go({ [name]: select.value }));
    return h('div.field', h('label', { for: id }, label), select);
  };
  root.appendChild(h('form.controls', { 'aria-label': 'Usage range and grouping' },
    picker('range', 'range', Object.entries(RANGES).map(([k, r]) => [k, r.label]), range),
    picker('group', 'group by', DIMENSIONS, dimension),
    picker('metric', 'chart', METRICS, metric),
    h('button', { type: 'button', onclick: () => go({}) }, 'Refresh')));
  root.appendChild(h('p.help.range-note', `From ${from} to ${to}, in UTC ${bucket}s.`));

  const q = `from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}&group_by=${dimension}`;
  const [bucketed, totals] = await Promise.all([
    api('GET', `/api/v1/usage?${q}&bucket=${bucket}`),
    api('GET', `/api/v1/usage?${q}`),
  ]);
  const t = totals.total;
  root.appendChild(section('Totals',
    h('dl.summary-grid#usage-summary',
      h('dt', 'requests'), h('dd', String(t.requests)),
      h('dt', 'input tokens'), h('dd', `${t.input_tokens} (${t.cached_tokens} cached)`),
      h('dt', 'output tokens'), h('dd', String(t.output_tokens)),
      h('dt', 'cost (USD)'), h('dd.cost', cost(t.cost_usd),
        t.cost_usd !== null && t.unpriced_requests ? h('small.help', ' (priced requests only)') : null),
      h('dt', 'unpriced requests'), h('dd', String(t.unpriced_requests),
        t.unpriced_requests ? h('small.help', ' — no price matched their channel and upstream model; see ', h('a', { href: '#/prices' }, 'Prices')) : null))));

  // The series: the groups by cost (then requests), the first few each on its own, the rest summed.
  const ranked = [...totals.groups].sort((a, b) =>
    (Number(b.cost_usd ?? 0) - Number(a.cost_usd ?? 0)) || (b.requests - a.requests));
  const shown = ranked.slice(0, ranked.length > MAX_SERIES ? MAX_SERIES - 1 : MAX_SERIES);
  const rest = ranked.slice(shown.length);
  const OTHER = `other (${rest.length} groups)`;
  const index = new Map(shown.map((g, i) => [g.key, i]));
  const series = shown.map((g) => ({
    name: groupName(dimension, g.key),
    values: new Array(count).fill(0),
    total: metric === 'cost' ? (g.cost_usd === null ? 'unpriced' : `${g.cost_usd} USD`) : `${g.requests} requests`,
  }));
  if (rest.length) series.push({ name: OTHER, values: new Array(count).fill(0), total: null, color: 8 });
  for (const g of bucketed.groups) {
    const i = Math.round((instant(g.bucket_start) - start) / unit);
    if (!(i >= 0 && i < count)) continue;
    // A group the totals did not have yet (usage reported between the two calls) is left out.
    const k = index.has(g.key) ? index.get(g.key) : rest.length ? series.length - 1 : -1;
    if (k < 0) continue;
    series[k].values[i] += metric === 'cost' ? Number(g.cost_usd ?? 0) : g.requests;
  }
  const per = bucket === 'hour' ? 'hour' : 'day';
  const title = `${metric === 'cost' ? 'Cost (USD)' : 'Requests'} per ${per} by ${dimension}`;
  const chart = section(title);
  chart.id = 'usage-chart';
  if (!t.requests) {
    chart.appendChild(h('p.empty', 'No usage in this range.'));
  } else {
    if (metric === 'cost' && t.cost_usd === null) {
      chart.appendChild(h('p.callout', 'Every request in this range was unpriced, so there is no cost to draw. ',
        h('a', { href: `#/usage?range=${range}&group=${dimension}&metric=requests` }, 'Chart the requests'), ' or add ',
        h('a', { href: '#/prices' }, 'prices'), '.'));
    }
    chart.appendChild(stackedBars({
      buckets: Array.from({ length: count }, (_, i) => bucketLabel(start + i * unit, bucket)),
      series,
      format: metric === 'cost' ? (v) => `${usd(v)} USD` : (v) => `${v} requests`,
      label: `${title}, ${RANGES[range].label.toLowerCase()}`,
      axis: metric === 'cost' ? 'USD' : 'requests',
    }));
  }
  root.appendChild(chart);

  root.appendChild(section(`Totals by ${dimension}`, table([
    { title: dimension, render: (g) => groupName(dimension, g.key) },
    { title: 'requests', key: 'requests' },
    { title: 'input tokens', key: 'input_tokens' },
    { title: 'cached tokens', key: 'cached_tokens' },
    { title: 'output tokens', key: 'output_tokens' },
    { title: 'cost (USD)', render: (g) => cost(g.cost_usd) },
    { title: 'unpriced requests', key: 'unpriced_requests' },
  ], ranked, { label: 'usage totals', empty: 'No usage in this range.' })));
}

// ---------------------------------------------------------------- budgets

export async function budgets(root) {
  heading(root, 'Budgets');
  const report = await api('GET', '/api/v1/budgets');
  root.appendChild(section('Spend limits in their current window',
    h('p.help', `Spend as of ${new Date(instant(report.computed_at)).toLocaleString()}, from the usage the proxies report (it trails them by a few seconds). `,
      'Windows are UTC calendar days and months. ',
      h('button', { type: 'button', onclick: () => { location.hash = `#/budgets?t=${Date.now()}`; } }, 'Refresh')),
    table([
      { title: 'limit', render: (b) => h('a', { href: `#/limits/${b.limit_id}` }, `#${b.limit_id}`) },
      { title: 'scope', render: (b) => (b.scope === 'end_user' && !b.scope_name
        ? `each end user${b.end_users.length ? ` (most spent: ${b.end_users.slice(0, 3).map((u) => `${u.end_user} ${u.spent_usd} USD`).join(', ')})` : ''}`
        : ['tag', 'end_user'].includes(b.scope) ? `${b.scope} ${b.scope_name}` : `${b.scope} ${b.scope_name} (#${b.scope_id})`) },
      { title: 'window', key: 'window' },
      { title: 'mode', key: 'mode' },
      { title: 'limit (USD)', key: 'value_usd' },
      { title: 'spent (USD)', render: (b) => h('span.spent', cost(b.spent_usd)) },
      { title: 'remaining (USD)', key: 'remaining_usd' },
      { title: 'used', render: (b) => {
        const ratio = Number(b.spent_usd ?? 0) / Number(b.value_usd);
        return bar(ratio, `${b.scope} ${b.scope_name} spent`, { tone: ratio >= 1 ? 'over' : ratio >= 0.8 ? 'near' : null, tiny: true });
      } },
      { title: 'unpriced requests', render: (b) => (b.unpriced_requests ? h('span.unpriced', `${b.unpriced_requests} (not counted)`) : '0') },
      { title: 'resets at', render: (b) => when(b.resets_at) },
    ], report.data, { label: 'budgets', empty: 'No spend limit yet: create one under Limits with the metric spend.' })));
  root.appendChild(h('p', h('a', { href: '#/limits' }, 'Edit limits')));
}

// ---------------------------------------------------------------- limits

const SCOPES = ['token', 'team', 'route', 'channel', 'member', 'tag', 'end_user'];
/** Scopes named by what a request says (a tag, an end user) rather than by an id. */
const ATTRIBUTED = ['tag', 'end_user'];
const LIMIT_METRICS = ['requests', 'tokens', 'concurrent', 'spend'];

/** What a limit can be put on: per scope, [id, label] pairs. */
async function scopeCandidates() {
  // An admin of one team may limit only its team and its tokens: routes and channels are the fleet's.
  const fleet = teamOnly() ? [] : ['routes', 'channels'];
  const [tokens, teams, routes = [], channels = []] = await Promise.all(
    ['tokens', 'teams', ...fleet].map((r) => all(`/api/v1/${r}`)));
  const members = (await Promise.all(routes.map((r) => all(`/api/v1/routes/${r.id}/members`)))).flat();
  const channelName = (id) => (channels.find((c) => c.id === id) || {}).name || `#${id}`;
  const routeName = (id) => (routes.find((r) => r.id === id) || {}).model_pattern || `#${id}`;
  const pairs = (rows, name) => rows.map((r) => [String(r.id), `${r.id}: ${name(r)}`]);
  return {
    token: pairs(tokens, (t) => t.name),
    team: pairs(teams, (t) => t.name),
    route: pairs(routes, (r) => r.model_pattern),
    channel: pairs(channels, (c) => c.name),
    member: pairs(members, (m) => `${m.upstream_model} on ${channelName(m.channel_id)} (route ${routeName(m.route_id)})`),
    tag: [],
    end_user: [],
  };
}

function limitFields(candidates, scope) {
  return [
    { name: 'scope', type: 'select', options: SCOPES, default: 'token' },
    { name: 'scope_id', type: 'select', options: candidates[scope] || [], label: 'scope_id', help: 'the token, team, route, channel or member it applies to (none for a tag or end user)' },
    { name: 'tag', nullable: true, help: 'scope tag: every request carrying this tag counts' },
    { name: 'end_user', nullable: true, help: 'scope end_user: this end user only; empty: each end user on a counter of their own (requests without an end user are not counted)' },
    { name: 'metric', type: 'select', options: LIMIT_METRICS, default: 'spend' },
    { name: 'window', type: 'select', nullable: true, default: 'day',
      options: [['', 'none (concurrent)'], 'minute', 'hour', 'day', 'month'],
      help: 'requests, tokens: minute, hour or day; spend: day or month (UTC calendar); concurrent: none' },
    { name: 'value', required: true, help: 'spend: USD, e.g. 25 or 0.50; otherwise a whole number' },
    { name: 'mode', type: 'select', options: ['hard', 'soft'], default: 'hard', help: 'hard refuses past the limit (429); soft only reports the crossing' },
    { name: 'notify_at', type: 'percentages', label: 'notify at (%)',
      help: 'spend only: percentages of the value that notify webhooks, e.g. 25, 90, 100; blank: the webhooks\' thresholds (50, 80, 100 by default); none: no notifications' },
  ];
}

/** The scope_id choices follow the scope picked. */
function followScope(form, candidates) {
  const scope = form.querySelector('[name="scope"]');
  const id = form.querySelector('[name="scope_id"]');
  scope.addEventListener('change', () => {
    clear(id);
    for (const option of options(candidates[scope.value] || [], '')) id.appendChild(option);
  });
  return form;
}

function limitBody(body) {
  if (ATTRIBUTED.includes(body.scope)) delete body.scope_id;
  else if (typeof body.scope_id === 'string') body.scope_id = Number(body.scope_id);
  for (const field of ['tag', 'end_user']) if (body[field] === '') body[field] = null;
  return body;
}

/** Whom a limit applies to, in words (a tag's or an end user's by name). */
function limitWhom(l, label) {
  if (l.scope === 'tag') return `tag ${l.tag}`;
  if (l.scope === 'end_user') return l.end_user ? `end user ${l.end_user}` : 'each end user';
  return label || `${l.scope} ${l.scope_id}`;
}

export async function limits(root, params) {
  heading(root, 'Limits');
  const [rows, candidates] = await Promise.all([all('/api/v1/limits'), scopeCandidates()]);
  const reload = () => { location.hash = `#/limits?t=${Date.now()}`; };
  const scopeLabel = (l) => {
    const found = (candidates[l.scope] || []).find(([id]) => id === String(l.scope_id));
    return limitWhom(l, found ? `${l.scope} ${found[1]}` : null);
  };
  const editHolder = h('div');
  const openEdit = (l) => {
    const form = editForm({
      title: `Edit limit #${l.id}`,
      fields: limitFields(candidates, l.scope),
      initial: { ...l, scope_id: String(l.scope_id), value: String(l.value), window: l.window === 'none' ? null : l.window },
      change: (body) => ({ op: 'patch', resource: 'limit', id: l.id, body: limitBody(body) }),
      save: (body) => api('PATCH', `/api/v1/limits/${l.id}`, limitBody(body)),
      onSaved: reload,
    });
    clear(editHolder).appendChild(followScope(form, candidates));
    form.querySelector('input, select').focus();
  };
  root.appendChild(section('All limits',
    h('p.help', 'Client limits (token, team, route, tag, end user) refuse requests past them with a 429 (hard) or only report the crossing (soft); ',
      'an end user limit without an end user gives each end user a counter of their own; ',
      'upstream limits (channel, member) make members without room ineligible instead. Spend in the current window: ',
      h('a', { href: '#/budgets' }, 'Budgets'), '.'),
    table([
      { title: 'id', key: 'id' },
      { title: 'scope', render: scopeLabel },
      { title: 'metric', key: 'metric' },
      { title: 'window', render: (l) => (l.window === 'none' ? '—' : l.window) },
      { title: 'value', render: (l) => (l.metric === 'spend' ? `${l.value} USD` : fmt(l.value)) },
      { title: 'mode', key: 'mode' },
      { title: 'notify at', render: (l) => (l.metric !== 'spend' ? '—'
        : !l.notify_at ? 'webhooks\' thresholds' : l.notify_at.length ? l.notify_at.map((t) => `${t} %`).join(', ') : 'none') },
      { title: '', render: (l) => h('span.row-actions',
        needs('operator', h('button', { type: 'button', 'aria-label': `Edit limit ${l.id}`, onclick: () => openEdit(l) }, 'Edit')),
        ' ',
        deleteButton('Delete', { op: 'delete', resource: 'limit', id: l.id }, () => api('DELETE', `/api/v1/limits/${l.id}`), reload)) },
    ], rows, { label: 'limits', empty: 'No limits yet.' }),
    editHolder));
  root.appendChild(section('New limit', followScope(editForm({
    title: 'Create a limit',
    fields: limitFields(candidates, 'token'),
    change: (body) => ({ op: 'create', resource: 'limit', body: limitBody(body) }),
    save: (body) => api('POST', '/api/v1/limits', limitBody(body)),
    onSaved: reload,
    submitLabel: 'Preview limit',
  }), candidates)));
  const chosen = params.id && rows.find((l) => String(l.id) === params.id);
  if (chosen) openEdit(chosen);
  else if (params.id) root.prepend(h('p.alert', { role: 'alert' }, `Limit #${params.id} does not exist (any more).`));
}

// ---------------------------------------------------------------- prices

function priceFields(channels) {
  return [
    { name: 'channel_id', type: 'select', options: channels.map((c) => [String(c.id), `${c.id}: ${c.name}`]), label: 'channel_id' },
    { name: 'model_pattern', required: true, help: 'the upstream model, or a pattern with * and ?; the most specific match prices a request' },
    { name: 'input_per_million', required: true, label: 'input_per_million (USD)', help: 'per million input tokens, e.g. 2.50' },
    { name: 'output_per_million', required: true, label: 'output_per_million (USD)', help: 'per million output tokens' },
    { name: 'cached_input_per_million', nullable: true, label: 'cached_input_per_million (USD)', help: 'per million cache-read input tokens; empty: charged as other input' },
  ];
}

function priceBody(body) {
  if (typeof body.channel_id === 'string') body.channel_id = Number(body.channel_id);
  return body;
}

export async function prices(root, params) {
  heading(root, 'Prices');
  const [rows, channels] = await Promise.all([all('/api/v1/prices'), all('/api/v1/channels')]);
  const reload = () => { location.hash = `#/prices?t=${Date.now()}`; };
  const channelName = (id) => (channels.find((c) => c.id === id) || {}).name || `#${id}`;
  const editHolder = h('div');
  const openEdit = (p) => {
    clear(editHolder).appendChild(editForm({
      title: `Edit price #${p.id}`,
      fields: priceFields(channels),
      initial: { ...p, channel_id: String(p.channel_id) },
      change: (body) => ({ op: 'patch', resource: 'price', id: p.id, body: priceBody(body) }),
      save: (body) => api('PATCH', `/api/v1/prices/${p.id}`, priceBody(body)),
      onSaved: reload,
    }));
    editHolder.querySelector('input, select').focus();
  };
  root.appendChild(section('All prices (USD per million tokens)',
    h('p.help', 'A request is priced with the most specific pattern of the channel that served it; a request no price matches is counted as unpriced, never as free.'),
    table([
      { title: 'id', key: 'id' },
      { title: 'channel', render: (p) => `${channelName(p.channel_id)} (#${p.channel_id})` },
      { title: 'model pattern', render: (p) => h('code', p.model_pattern) },
      { title: 'input', key: 'input_per_million' },
      { title: 'output', key: 'output_per_million' },
      { title: 'cached input', render: (p) => p.cached_input_per_million ?? 'as input' },
      { title: '', render: (p) => h('span.row-actions',
        needs('operator', h('button', { type: 'button', 'aria-label': `Edit price ${p.id}`, onclick: () => openEdit(p) }, 'Edit')),
        ' ',
        deleteButton('Delete', { op: 'delete', resource: 'price', id: p.id }, () => api('DELETE', `/api/v1/prices/${p.id}`), reload)) },
    ], rows, { label: 'prices', empty: 'No prices yet: every request is unpriced.' }),
    editHolder));
  root.appendChild(section('New price', editForm({
    title: 'Create a price',
    fields: priceFields(channels),
    change: (body) => ({ op: 'create', resource: 'price', body: priceBody(body) }),
    save: (body) => api('POST', '/api/v1/prices', priceBody(body)),
    onSaved: reload,
    submitLabel: 'Preview price',
  })));
  const chosen = params.id && rows.find((p) => String(p.id) === params.id);
  if (chosen) openEdit(chosen);
}
