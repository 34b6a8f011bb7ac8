// Guardrails: the rules that check what requests send and what answers bring back, each with
// what it is attached to, when it runs, what it does (and, in shadow mode, that it only
// reports), and its report: how many requests and answers it checked, what it blocked or
// redacted (or would have), its findings by kind and a few masked examples. Never a matched text:
// the proxies report kinds, counts and masked examples only. Read-only here: rules are created
// and changed through the API (`/api/v1/guardrails`) or the configuration file.
import { api, all } from './api.js';
import { h, table } from './dom.js';
import { section, heading } from './views.js';

function attached(rule) {
  return rule.scope === 'all' ? 'all traffic' : `${rule.scope} #${rule.scope_id}`;
}

/** What a finding does now: its action, or in shadow mode only a report of it. */
function doing(rule) {
  if (!rule.enabled) return 'paused';
  return rule.mode === 'shadow' ? `reports (would ${rule.action})` : rule.action;
}

function checkNames(rule) {
  return Object.keys(rule.checks || {}).sort().join(', ');
}

export async function guardrails(root, params) {
  if (params.id) return report(root, params.id);
  heading(root, 'Guardrails');
  const rules = await all('/api/v1/guardrails');
  root.appendChild(section('Rules',
    h('p.help', 'Every enabled rule attached to a request\u2019s route, its token\u2019s team, its token or all traffic runs, in id order. ',
      'A rule in shadow mode never changes a request or an answer: its report says what it would have done. ',
      'Create and change rules through the API (POST/PATCH /api/v1/guardrails) or the configuration file.'),
    table([
      { title: 'name', render: (r) => h('a', { href: `#/guardrails/${r.id}` }, r.name) },
      { title: 'attached to', render: attached },
      { title: 'stage', key: 'stage' },
      { title: 'action', key: 'action' },
      { title: 'mode', render: (r) => h(`span.${r.mode}`, r.mode) },
      { title: 'on a finding', render: doing },
      { title: 'restore', key: 'restore' },
      { title: 'uninspectable', key: 'uninspectable' },
      { title: 'checks', render: checkNames },
    ], rules, { label: 'guardrails', empty: 'No guardrail yet.' })));
}

async function report(root, id) {
  const rule = await api('GET', `/api/v1/guardrails/${encodeURIComponent(id)}`);
  const r = await api('GET', `/api/v1/guardrails/${encodeURIComponent(id)}/report`);
  heading(root, `Guardrail ${rule.name}`);
  root.appendChild(h('p',
    `${attached(rule)} · ${rule.stage} · ${rule.action} · ${rule.mode} · on a finding: ${doing(rule)} · `,
    h('a', { href: '#/guardrails' }, 'All rules')));
  const shadow = rule.mode === 'shadow';
  const counts = [
    ['checked', r.checked],
    [shadow ? 'would block' : 'blocked', shadow ? r.would_block : r.blocked],
    [shadow ? 'would redact' : 'redacted', shadow ? r.would_redact : r.redacted],
    ['external checks without a verdict', r.external_failures],
  ];
  root.appendChild(section('What it did',
    h('dl#guardrail-counts', counts.map(([name, value]) => [h('dt', name), h(`dd.${name.replace(/ /g, '-')}`, String(value))]))));
  const findings = Object.entries(r.findings).map(([kind, count]) => ({ kind, count }));
  root.appendChild(section('Findings by kind',
    table([{ title: 'kind', key: 'kind' }, { title: 'count', key: 'count' }], findings,
      { label: 'guardrail findings', empty: 'Nothing found yet.' })));
  root.appendChild(section('Masked examples',
    h('p.help', 'What matched, masked by the proxy before it was reported: the text itself never leaves the proxy.'),
    r.examples.length
      ? h('ul#guardrail-examples', r.examples.map((e) => h('li', h('code', e))))
      : h('p.empty', 'No example yet.')));
}
