// The response cache: its rules (created, changed and deleted after their dry run, like every
// other resource) and, per route, how often the cache answered and what that saved, from the
// usage the proxies report (refreshed while the page is open). A rule with a semantic part shows
// its trial report: how often a similar earlier answer would have served, and how well it agreed.
import { api, all, ApiError, needs } from './api.js';
import { h, clear, table, fmt, bar } from './dom.js';
import { editForm, deleteButton, section, heading, options } from './views.js';

const HOUR = 3_600_000;
const RANGES = {
  '1h': { label: 'Last hour', ms: HOUR },
  '24h': { label: 'Last 24 hours', ms: 24 * HOUR },
  '7d': { label: 'Last 7 days', ms: 7 * 24 * HOUR },
};
const ENDPOINTS = ['chat_completions', 'completions', 'embeddings', 'messages', 'generate_content', 'responses'];
/** How often the per-route figures are fetched again while the page is open. */
const REFRESH_MS = 5_000;

const RULE_FIELDS = [
  { name: 'name', required: true },
  { name: 'model_pattern', required: true, help: 'the model asked for (* and ? wildcards), or the pattern of the route serving it' },
  { name: 'endpoints', type: 'list', default: ['chat_completions', 'messages', 'generate_content'],
    help: `comma-separated: ${ENDPOINTS.join(', ')}` },
  { name: 'ttl_seconds', type: 'number', default: 300, help: 'how long an answer is served again' },
  { name: 'max_entry_bytes', type: 'number', help: 'the largest answer kept; empty: 1048576 (1 MiB)' },
  { name: 'scope', type: 'select', options: ['team', 'route', 'token'], default: 'team',
    help: 'who shares an answer: a team (a token without one: itself), everyone on the route, or one token' },
  { name: 'deterministic_only', type: 'checkbox', help: 'only requests with temperature 0 or a seed' },
  { name: 'enabled', type: 'checkbox', default: true },
  { name: 'semantic', type: 'json', nullable: true,
    help: 'optional: {"channel": <id>, "model": "<embedding model>", "threshold": 0.95, "mode": "trial" or "serve"}; empty: exact matches only' },
];

/** A share (0..1) as a percentage, or a dash when there is nothing to divide. */
function percent(part, whole) {
  return whole ? `${((part / whole) * 100).toFixed(1)} %` : '—';
}

function semanticTerms(s) {
  if (!s) return '—';
  return `${s.mode} · ${s.model} on channel #${s.channel} · threshold ${s.threshold}`;
}

export async function cache(root, params) {
  heading(root, 'Response cache');
  const range = RANGES[params.range] ? params.range : '1h';
  const rules = await all('/api/v1/cache_rules');
  const reload = () => { location.hash = `#/cache?range=${range}&t=${Date.now()}`; };

  const picker = h('select', { id: 'cache-range', name: 'range' },
    options(Object.entries(RANGES).map(([k, r]) => [k, r.label]), range));
  picker.addEventListener('change', () => { location.hash = `#/cache?range=${picker.value}`; });
  const stats = h('div#cache-stats', { 'aria-live': 'off' });
  const refresh = async () => {
    try {
      draw(stats, await figures(RANGES[range].ms), range);
    } catch (error) {
      clear(stats).appendChild(h('p.alert', error.message));
    }
  };
  root.appendChild(h('form.controls', { 'aria-label': 'Cache figures range' },
    h('div.field', h('label', { for: 'cache-range' }, 'range'), picker),
    h('button', { type: 'button', onclick: refresh }, 'Refresh')));
  root.appendChild(stats);
  await refresh();

  ruleList(root, rules, reload);
  for (const rule of rules.filter((r) => r.semantic)) root.appendChild(await trialPanel(rule));
  root.appendChild(section('New rule', editForm({
    title: 'Create a cache rule',
    fields: RULE_FIELDS,
    change: (body) => ({ op: 'create', resource: 'cache_rule', body }),
    save: (body) => api('POST', '/api/v1/cache_rules', body),
    onSaved: reload,
    submitLabel: 'Preview rule',
  })));
  const chosen = params.id && rules.find((r) => String(r.id) === params.id);
  if (chosen) root.querySelector(`[aria-label="Edit cache rule ${chosen.id}"]`)?.click();
  const timer = setInterval(refresh, REFRESH_MS);
  return () => clearInterval(timer);
}

/** The usage of the last `ms` by route. */
async function figures(ms) {
  const to = new Date(Date.now() + 60_000);
  const from = new Date(to.getTime() - ms - 60_000);
  const q = `from=${encodeURIComponent(from.toISOString())}&to=${encodeURIComponent(to.toISOString())}&group_by=route`;
  return api('GET', `/api/v1/usage?${q}`);
}

function draw(stats, usage, range) {
  const t = usage.total;
  const routes = usage.groups.filter((g) => g.requests > 0)
    .sort((a, b) => (b.cache_hits - a.cache_hits) || (b.requests - a.requests));
  clear(stats).appendChild(section(`Hits and savings by route (${RANGES[range].label.toLowerCase()})`,
    h('p.help', 'A hit is a request answered from the cache: counted as a request, with no tokens and no cost. ',
      'Saved: what the answers the hits served had used and cost when they were fresh. ',
      `Refreshed every ${REFRESH_MS / 1000} s; the proxies report usage every few seconds.`),
    h('dl.summary-grid#cache-summary',
      h('dt', 'requests'), h('dd', String(t.requests)),
      h('dt', 'cache hits'), h('dd.hits', String(t.cache_hits), ` (${percent(t.cache_hits, t.requests)})`),
      h('dt', 'saved tokens'), h('dd', `${t.saved_input_tokens} input, ${t.saved_output_tokens} output`),
      h('dt', 'saved cost (USD)'), h('dd', t.saved_cost_usd)),
    table([
      { title: 'route', render: (g) => g.key || '(none)' },
      { title: 'requests', key: 'requests' },
      { title: 'hits', render: (g) => h('span.hits', String(g.cache_hits)) },
      { title: 'hit rate', render: (g) => bar(g.cache_hits / g.requests, `${g.key} hit rate`, { tiny: true }) },
      { title: 'saved input tokens', key: 'saved_input_tokens' },
      { title: 'saved output tokens', key: 'saved_output_tokens' },
      { title: 'saved cost (USD)', key: 'saved_cost_usd' },
    ], routes, { label: 'cache by route', empty: 'No requests in this range.' })));
}

function ruleList(root, rules, reload) {
  const editHolder = h('div');
  const openEdit = (rule) => {
    clear(editHolder).appendChild(editForm({
      title: `Edit cache rule #${rule.id}`,
      fields: RULE_FIELDS,
      initial: rule,
      change: (body) => ({ op: 'patch', resource: 'cache_rule', id: rule.id, body }),
      save: (body) => api('PATCH', `/api/v1/cache_rules/${rule.id}`, body),
      onSaved: reload,
    }));
    editHolder.querySelector('input, select').focus();
  };
  root.appendChild(section('Rules',
    h('p.help', 'A request a rule covers is answered from the cache when an identical one was answered within the TTL ',
      '(same protocol, route, model, scope and body, without the fields that only shape the transport). ',
      'Clients skip the read with Cache-Control: no-cache and the write with no-store.'),
    table([
      { title: 'id', key: 'id' },
      { title: 'name', key: 'name' },
      { title: 'model pattern', render: (r) => h('code', r.model_pattern) },
      { title: 'endpoints', render: (r) => r.endpoints.join(', ') },
      { title: 'TTL (s)', key: 'ttl_seconds' },
      { title: 'max entry (bytes)', key: 'max_entry_bytes' },
      { title: 'scope', key: 'scope' },
      { title: 'deterministic only', key: 'deterministic_only' },
      { title: 'enabled', key: 'enabled' },
      { title: 'semantic', render: (r) => semanticTerms(r.semantic) },
      { title: '', render: (r) => h('span.row-actions',
        needs('operator', h('button', { type: 'button', 'aria-label': `Edit cache rule ${r.id}`, onclick: () => openEdit(r) }, 'Edit')),
        ' ',
        deleteButton('Delete', { op: 'delete', resource: 'cache_rule', id: r.id }, () => api('DELETE', `/api/v1/cache_rules/${r.id}`), reload)) },
    ], rules, { label: 'cache rules', empty: 'No cache rule yet: no request is answered from the cache.' }),
    editHolder));
}

/** A semantic rule's trial report; "no report" when the API has none for it. */
async function trialPanel(rule) {
  let report = null;
  let problem = null;
  try {
    report = await api('GET', `/api/v1/cache_rules/${rule.id}/trial`);
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 404) problem = error.message;
  }
  const title = `Semantic trial: ${rule.name}`;
  if (problem) return section(title, h('p.alert', problem));
  if (!report || typeof report !== 'object') return section(title, h('p.empty', 'No report.'));
  const n = (v) => (typeof v === 'number' ? v : 0);
  const mean = (v) => (typeof v === 'number' ? v.toFixed(3) : '—');
  return section(title,
    h('p.help', `Mode ${fmt(report.mode ?? rule.semantic.mode)}. Looked up: requests that missed the exact cache and were compared; `,
      'would hit: a stored answer was similar enough; agreed: the fresh answer said what the stored one did.'),
    table([
      { title: 'measure', key: 'measure' },
      { title: 'value', render: (row) => h('span.trial-value', row.value) },
    ], [
      { measure: 'looked up', value: String(n(report.looked_up)) },
      { measure: 'would hit', value: `${n(report.would_hit)} (${percent(n(report.would_hit), n(report.looked_up))})` },
      { measure: 'agreed', value: `${n(report.agreed)} (${percent(n(report.agreed), n(report.would_hit))} of would-hit)` },
      { measure: 'mean score', value: mean(report.mean_score) },
      { measure: 'mean similarity', value: mean(report.mean_similarity) },
      { measure: 'first seen', value: fmt(report.first_seen) },
      { measure: 'last seen', value: fmt(report.last_seen) },
    ], { label: `semantic trial of ${rule.name}` }));
}
