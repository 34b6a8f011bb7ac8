// The request log: the latest requests the proxies reported (metadata only, never a body), with
// the API's filters. Filters live in the page's address (#/requests?tag=...), so a filtered view
// can be reloaded and shared; "Older requests" follows the API's cursor.
import { api } from './api.js';
import { h, table, fmt } from './dom.js';
import { section, heading } from './views.js';

const FILTERS = ['token', 'team', 'route', 'model', 'channel', 'status', 'error_code', 'tag', 'end_user', 'since', 'until'];

function filterForm(params) {
  const inputs = FILTERS.map((name) => {
    const id = `rq-${name}`;
    return h('div.field', h('label', { for: id }, name),
      h('input', { id, name, type: 'text', value: params[name] || '', autocomplete: 'off' }));
  });
  const form = h('form.edit', { 'aria-label': 'Filter requests' },
    h('div.fields', inputs),
    h('div.actions', h('button', { type: 'submit' }, 'Filter')));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const q = new URLSearchParams();
    for (const name of FILTERS) {
      const value = form.querySelector(`[name="${name}"]`).value.trim();
      if (value) q.set(name, value);
    }
    q.set('t', String(Date.now()));
    location.hash = `#/requests?${q}`;
  });
  return form;
}

const COLUMNS = [
  { title: 'time', key: 'at' },
  { title: 'request id', render: (r) => h('code.request-id', r.request_id) },
  { title: 'token', key: 'token' },
  { title: 'route', key: 'route' },
  { title: 'model', render: (r) => (r.served_model && r.served_model !== r.model ? `${fmt(r.model)} → ${r.served_model}` : fmt(r.model)) },
  { title: 'channel', key: 'channel' },
  { title: 'attempts', key: 'attempts' },
  { title: 'status', render: (r) => h('span.status', String(r.status)) },
  { title: 'error', key: 'error_code' },
  { title: 'latency ms', key: 'latency_ms' },
  { title: 'first token ms', key: 'first_token_ms' },
  { title: 'tokens in / out', render: (r) => `${r.input_tokens} / ${r.output_tokens}` },
  { title: 'cost (USD)', render: (r) => r.cost_usd ?? '—' },
  { title: 'cache', key: 'cache' },
  { title: 'tags', render: (r) => (r.tags.length ? r.tags.map((t) => h('span.tag', t)) : '—') },
  { title: 'end user', key: 'end_user' },
];

export async function requests(root, params) {
  heading(root, 'Requests');
  const q = new URLSearchParams();
  for (const name of FILTERS) if (params[name]) q.set(name, params[name]);
  const rows = [];
  const list = h('div#request-list');
  const more = h('button', { type: 'button' }, 'Older requests');
  let cursor = '';
  const load = async () => {
    const page = await api('GET', `/api/v1/requests?${q}&limit=50${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    rows.push(...page.data);
    cursor = page.next_cursor || '';
    more.hidden = !cursor;
    list.replaceChildren(table(COLUMNS, rows, { label: 'requests', empty: 'No request matches.' }));
  };
  more.addEventListener('click', () => { load().catch((error) => list.appendChild(h('p.alert', { role: 'alert' }, error.message))); });
  root.appendChild(section('Filters',
    h('p.help', 'Every finished request the proxies reported, newest first: its metadata, never its body. ',
      'Export with GET /api/v1/requests?format=csv (or jsonl) and the same filters.'),
    filterForm(params)));
  root.appendChild(section('Latest requests', list, h('div.actions', more)));
  await load();
}
