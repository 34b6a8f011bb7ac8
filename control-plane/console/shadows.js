// Shadow trials: the rules that copy sampled requests to a candidate target, and for each one the
// live answers and the shadow's side by side. Read-only here: rules are created, changed and
// resumed through the API (`/api/v1/shadows`), which the console's role checks also govern.
import { api, all } from './api.js';
import { h, table } from './dom.js';
import { section, heading } from './views.js';

/** A share (0..1) as a percentage, or a dash when the API has none. */
function percent(value) {
  return value === null || value === undefined ? '—' : `${(value * 100).toFixed(1)} %`;
}

function millis(value) {
  return value === null || value === undefined ? '—' : `≤ ${value} ms`;
}

function target(rule) {
  return rule.target_member_id !== null && rule.target_member_id !== undefined
    ? `member #${rule.target_member_id}`
    : `channel #${rule.target_channel_id} · ${rule.target_model}`;
}

function state(rule) {
  if (rule.stopped_reason) return h('span.stopped', `stopped: ${rule.stopped_reason}`);
  return rule.enabled ? 'running' : 'disabled';
}

export async function shadows(root, params) {
  if (params.id) return report(root, params.id);
  heading(root, 'Shadow trials');
  const rules = await all('/api/v1/shadows');
  root.appendChild(section('Rules',
    h('p.help', 'A rule copies a sample of the requests whose model matches its pattern to a candidate target, after the client has its answer, and compares the two. ',
      'Create and change rules through the API (POST/PATCH /api/v1/shadows).'),
    table([
      { title: 'name', render: (r) => h('a', { href: `#/shadows/${r.id}` }, r.name) },
      { title: 'model pattern', key: 'model_pattern' },
      { title: 'target', render: target },
      { title: 'sample', render: (r) => `${r.sample_percent} %` },
      { title: 'max rps', key: 'max_rps' },
      { title: 'daily spend cap (USD)', render: (r) => r.max_daily_spend_usd ?? '—' },
      { title: 'expires', render: (r) => r.expires_at ?? '—' },
      { title: 'state', render: state },
    ], rules, { label: 'shadow rules', empty: 'No shadow rule yet.' })));
}

async function report(root, id) {
  const r = await api('GET', `/api/v1/shadows/${encodeURIComponent(id)}/report`);
  heading(root, `Shadow trial ${r.shadow.name}`);
  root.appendChild(h('p',
    `${r.pairs} pairs · target ${target(r.shadow)} · sample ${r.shadow.sample_percent} % · `,
    r.stopped_reason ? h('strong.stopped', `stopped by itself: ${r.stopped_reason}`) : state(r.shadow),
    ' · ', h('a', { href: '#/shadows' }, 'All rules')));
  const side = (title, s) => [title, s];
  const rows = [
    ['requests', (s) => String(s.requests)],
    ['success rate', (s) => percent(s.success_rate)],
    ['latency p50', (s) => millis(s.latency_p50_ms)],
    ['latency p95', (s) => millis(s.latency_p95_ms)],
    ['first byte p50', (s) => millis(s.first_byte_p50_ms)],
    ['first byte p95', (s) => millis(s.first_byte_p95_ms)],
    ['input tokens', (s) => String(s.input_tokens)],
    ['output tokens', (s) => String(s.output_tokens)],
    ['cost (USD)', (s) => s.cost_usd ?? 'unpriced'],
    ['cost per 1 000 requests (USD)', (s) => s.cost_per_1000_usd ?? 'unpriced'],
  ];
  const sides = [side('live', r.live), side('shadow', r.shadow_side)];
  root.appendChild(section('Live and shadow side by side',
    table([
      { title: 'figure', render: (row) => row[0] },
      ...sides.map(([title, s]) => ({ title, render: (row) => h(`span.${title}`, row[1](s)) })),
    ], rows, { label: 'live and shadow' })));
  const a = r.agreement;
  root.appendChild(section('How the answers agree',
    h('p.help', `Over the ${a.compared} pairs where both answered in full (streams are compared on status, time, tokens and cost only). `,
      'Similarity is the Jaccard index of the two answers\u2019 sets of lowercase words.'),
    table([
      { title: 'measure', key: 'measure' },
      { title: 'value', render: (row) => h('span.agreement', row.value) },
    ], [
      { measure: 'same finish reason', value: percent(a.same_finish_reason) },
      { measure: 'same tool-call names', value: percent(a.same_tool_names) },
      { measure: 'shadow tool arguments valid JSON', value: percent(a.shadow_tool_args_valid) },
      { measure: `shadow valid JSON (JSON mode asked ${a.json_mode_asked} times)`, value: percent(a.shadow_json_valid) },
      { measure: 'mean length ratio (shadow / live)', value: a.mean_length_ratio === null ? '—' : a.mean_length_ratio.toFixed(2) },
      { measure: 'mean text similarity', value: a.mean_similarity === null ? '—' : a.mean_similarity.toFixed(2) },
    ], { label: 'agreement' })));
}
