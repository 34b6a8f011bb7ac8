// Webhooks: where notifications go (budget thresholds, limits refusing, channels disabled or
// recovered, trials finished), and each target's recent deliveries with their status. A signing
// secret is write-only: typed once here, or named as an environment variable of the control plane.
import { api, all } from './api.js';
import { h, table } from './dom.js';
import { deleteButton, editForm, heading, section } from './views.js';

const EVENTS = ['budget_threshold', 'limit_refusing', 'channel_auto_disabled', 'channel_recovered', 'trial_finished'];

function webhookFields() {
  return [
    { name: 'name', required: true },
    { name: 'url', required: true, help: 'http:// or https://; a read shows its origin only' },
    { name: 'kind', type: 'select', options: ['json', 'slack'], default: 'json', help: 'json: the whole event; slack: {"text": …} for Slack, Mattermost or Teams' },
    { name: 'events', type: 'list', default: EVENTS, help: `comma-separated: ${EVENTS.join(', ')}` },
    { name: 'thresholds', type: 'numlist', default: [50, 80, 100], help: 'budget percentages told about, for budgets without thresholds of their own' },
    { name: 'secret', type: 'password', help: '16 to 256 bytes; signs every delivery; never shown again. Or leave it empty and name secret_env' },
    { name: 'secret_env', help: 'an environment variable of the control plane holding the secret' },
  ];
}

/** Where the webhook's signing secret comes from. */
function secretSource(w) {
  return w.secret_env ? `env ${w.secret_env}` : 'stored';
}

export async function webhooks(root, params) {
  if (params.id) return deliveries(root, params.id);
  heading(root, 'Webhooks');
  const rows = await all('/api/v1/webhooks');
  const reload = () => { location.hash = `#/webhooks?t=${Date.now()}`; };
  root.appendChild(section('Targets',
    h('p.help', 'Each event goes to the enabled webhooks subscribed to it, signed (x-switchyard-signature), retried until delivered, never twice. ',
      'Open a webhook to see its recent deliveries.'),
    table([
      { title: 'name', render: (w) => h('a', { href: `#/webhooks/${w.id}` }, w.name) },
      { title: 'url', key: 'url' },
      { title: 'kind', key: 'kind' },
      { title: 'events', render: (w) => w.events.join(', ') },
      { title: 'thresholds', render: (w) => w.thresholds.map((t) => `${t} %`).join(', ') },
      { title: 'secret', render: secretSource },
      { title: 'state', render: (w) => (w.enabled ? 'enabled' : 'disabled') },
      { title: '', render: (w) => deleteButton('Delete', { op: 'delete', resource: 'webhook', id: w.id },
        () => api('DELETE', `/api/v1/webhooks/${w.id}`), reload) },
    ], rows, { label: 'webhooks', empty: 'No webhook yet: notifications go nowhere.' })));
  root.appendChild(section('New webhook', editForm({
    title: 'Create a webhook',
    fields: webhookFields(),
    change: (body) => ({ op: 'create', resource: 'webhook', body }),
    save: (body) => api('POST', '/api/v1/webhooks', body),
    onSaved: reload,
    submitLabel: 'Preview webhook',
  })));
}

async function deliveries(root, id) {
  const [hook, list] = await Promise.all([
    api('GET', `/api/v1/webhooks/${encodeURIComponent(id)}`),
    api('GET', `/api/v1/webhooks/${encodeURIComponent(id)}/deliveries`),
  ]);
  heading(root, `Webhook ${hook.name}`);
  root.appendChild(h('p', `${hook.url} · ${hook.kind} · secret ${secretSource(hook)} · `,
    h('a', { href: '#/webhooks' }, 'All webhooks')));
  root.appendChild(section('Recent deliveries',
    h('p.help', 'The 50 most recent, newest first. A pending delivery is sent again at its next attempt; failed: no attempt is left.'),
    table([
      { title: 'event', key: 'event' },
      { title: 'what happened', render: (d) => d.text ?? '—' },
      { title: 'at', key: 'at' },
      { title: 'status', render: (d) => h(`span.delivery-${d.state}`, d.state) },
      { title: 'attempts', key: 'attempts' },
      { title: 'last error', render: (d) => d.last_error ?? '—' },
      { title: 'next attempt', render: (d) => d.next_at ?? '—' },
      { title: 'delivered', render: (d) => d.delivered_at ?? '—' },
    ], list.data, { label: 'deliveries', empty: 'No delivery yet.' })));
}
