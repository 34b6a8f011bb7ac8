// The console's views. Each view is `async (root, params) => cleanup?`; it renders into `root`.
import { api, all, dryRun, ApiError, allowed, needs, teamOnly } from './api.js';
import { h, clear, table, fmt, bar, generic } from './dom.js';

// ---------------------------------------------------------------- forms, validation, dry-run

/** Field kinds: text, password, number, checkbox, select, tristate (unset/true/false), list
 * (comma-separated strings), numlist (comma-separated integers), json. A select's options are
 * values or [value, label] pairs. `nullable`: an empty text or select reads as null (cleared). */
function field(spec, value) {
  const id = `f-${spec.name.replace(/\W/g, '-')}-${Math.random().toString(36).slice(2, 7)}`;
  let input;
  const common = { id, name: spec.name, 'aria-describedby': `${id}-err` };
  switch (spec.type) {
    case 'checkbox':
      input = h('input', { ...common, type: 'checkbox', checked: !!value });
      break;
    case 'select':
      input = h('select', common, options(spec.options, value));
      break;
    case 'tristate':
      input = h('select', common,
        [['', 'unset (global)'], ['true', 'true'], ['false', 'false']].map(([v, t]) =>
          h('option', { value: v, selected: String(value ?? '') === v }, t)));
      break;
    case 'json':
      input = h('textarea', { ...common, rows: 3, spellcheck: 'false' });
      input.value = value === undefined || value === null ? '' : JSON.stringify(value);
      break;
    case 'list':
    case 'numlist':
      input = h('input', { ...common, type: 'text', value: Array.isArray(value) ? value.join(', ') : (value ?? '') });
      break;
    case 'percentages':
      // Blank: unset (null); `none`: an empty list; else comma-separated numbers.
      input = h('input', { ...common, type: 'text',
        value: Array.isArray(value) ? (value.length ? value.join(', ') : 'none') : '' });
      break;
    default:
      input = h('input', {
        ...common,
        type: spec.type === 'number' ? 'number' : spec.type === 'password' ? 'password' : 'text',
        value: value ?? '',
        autocomplete: spec.type === 'password' ? 'new-password' : 'off',
        required: spec.required,
      });
  }
  input.dataset.kind = spec.type || 'text';
  if (spec.nullable) input.dataset.nullable = 'true';
  const wrap = h('div.field', { dataset: { field: spec.name } },
    h('label', { for: id }, spec.label || spec.name),
    input,
    spec.help ? h('small.help', spec.help) : null,
    h('span.field-error', { id: `${id}-err`, role: 'alert' }));
  if (spec.type === 'checkbox') wrap.classList.add('field-check');
  return wrap;
}

/** <option>s for a select: values or [value, label] pairs, `value` selected. */
export function options(list, value) {
  return list.map((o) => {
    const [v, text] = Array.isArray(o) ? o : [o, o];
    return h('option', { value: v, selected: String(v) === String(value ?? '') }, text);
  });
}

function readValue(input) {
  const kind = input.dataset.kind;
  const raw = input.value;
  if (input.dataset.nullable && raw.trim() === '') return null;
  switch (kind) {
    case 'checkbox': return input.checked;
    case 'number': return raw.trim() === '' ? undefined : Number(raw);
    case 'tristate': return raw === '' ? null : raw === 'true';
    case 'list': return raw.split(',').map((s) => s.trim()).filter(Boolean);
    case 'numlist': return raw.split(',').map((s) => s.trim()).filter(Boolean).map(Number);
    case 'percentages':
      if (raw.trim() === '') return null;
      if (raw.trim().toLowerCase() === 'none') return [];
      return raw.split(',').map((s) => s.trim()).filter(Boolean).map(Number);
    case 'json':
      if (raw.trim() === '') return undefined;
      try { return JSON.parse(raw); } catch { return { __invalid_json: raw }; }
    default: return raw;
  }
}

/** The body a form describes: every filled field (create) or every changed field (edit). */
function collect(form, fields, initial) {
  const body = {};
  for (const spec of fields) {
    const input = form.querySelector(`[name="${spec.name}"]`);
    if (!input) continue;
    const value = readValue(input);
    if (initial) {
      if (JSON.stringify(value ?? null) !== JSON.stringify(initial[spec.name] ?? null)) body[spec.name] = value ?? null;
    } else if (value !== undefined && value !== '' && value !== null) {
      body[spec.name] = value;
    }
  }
  for (const [k, v] of Object.entries(body)) {
    if (v && typeof v === 'object' && '__invalid_json' in v) {
      throw new ApiError(422, { error: { message: `${k}: not valid JSON`, param: k } });
    }
  }
  return body;
}

function clearErrors(form) {
  form.querySelectorAll('.field-error').forEach((e) => { e.textContent = ''; });
  form.querySelectorAll('[aria-invalid]').forEach((e) => e.removeAttribute('aria-invalid'));
  const general = form.querySelector('.form-error');
  if (general) general.textContent = '';
}

/** Shows an API error at the field it names (`param`, with any `changes[i].body.` prefix). */
function showError(form, error) {
  const param = (error.param || '').replace(/^changes\[\d+\]\.body\.?/, '');
  const head = param.split(/[.[]/)[0];
  const wrap = head && form.querySelector(`[data-field="${head}"]`);
  if (wrap) {
    wrap.querySelector('.field-error').textContent = error.message;
    const input = wrap.querySelector('input, select, textarea');
    input.setAttribute('aria-invalid', 'true');
    input.focus();
  } else {
    form.querySelector('.form-error').textContent = error.message;
  }
}

/** A form whose submit first shows the change's dry run, and saves only when confirmed. */
export function editForm({ title, fields, initial, change, save, onSaved, submitLabel = 'Preview change' }) {
  const preview = h('div.preview', { 'aria-live': 'polite' });
  // Previewing is a dry run (operator); saving is a write (admin).
  const form = h('form.edit', { 'aria-label': title, novalidate: true },
    h('h3', title),
    h('div.fields', fields.map((spec) => field(spec, initial ? initial[spec.name] : spec.default))),
    h('p.form-error', { role: 'alert' }),
    h('div.actions', needs('operator', h('button', { type: 'submit' }, submitLabel))),
    preview);
  if (!allowed('operator')) {
    // A viewer sees an existing resource's values, read-only, and no form to create one.
    if (initial) form.querySelectorAll('input, select, textarea').forEach((input) => { input.disabled = true; });
    else needs('operator', form);
  }
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    clearErrors(form);
    clear(preview);
    let body;
    try {
      body = collect(form, fields, initial);
      if (initial && !Object.keys(body).length) {
        form.querySelector('.form-error').textContent = 'Nothing changed.';
        return;
      }
      // Dry runs are for fleet admins: an admin of one team saves without one.
      const report = teamOnly() ? null : await dryRun([change(body)]);
      const saveButton = needs('admin', h('button.primary', { type: 'button' }, 'Save'));
      const readOnly = allowed('admin') ? null : h('small.help.read-only', 'Saving needs the admin role.');
      const cancel = h('button', { type: 'button', onclick: () => clear(preview) }, 'Cancel');
      saveButton.addEventListener('click', async () => {
        clearErrors(form);
        saveButton.disabled = true;
        try {
          const result = await save(body);
          clear(preview);
          await onSaved(result);
        } catch (error) {
          saveButton.disabled = false;
          showError(form, error);
        }
      });
      preview.appendChild(h('section.dry-run', { 'aria-label': 'Dry run' },
        h('h4', report ? 'Dry run: what this change would move' : 'Save this change?'),
        report ? renderDryRun(report) : null,
        h('div.actions', saveButton, cancel, readOnly)));
      if (!saveButton.hidden) saveButton.focus();
    } catch (error) {
      showError(form, error);
    }
  });
  return form;
}

/** A delete button that shows the dry run of the delete before doing it. */
export function deleteButton(label, change, remove, onDone) {
  const holder = h('span.delete-holder');
  const button = h('button.danger', { type: 'button' }, label);
  button.addEventListener('click', async () => {
    clear(holder);
    try {
      const report = teamOnly() ? null : await dryRun([change]);
      const confirm = needs('admin', h('button.danger', { type: 'button' }, 'Confirm delete'));
      confirm.addEventListener('click', async () => {
        try { await remove(); await onDone(); } catch (error) { clear(holder).appendChild(h('p.form-error', error.message)); }
      });
      holder.appendChild(h('div.dry-run.inline', h('h4', report ? 'Dry run of this delete' : 'Delete this?'),
        report ? renderDryRun(report) : null,
        h('div.actions', confirm, h('button', { type: 'button', onclick: () => clear(holder) }, 'Cancel'),
          allowed('admin') ? null : h('small.help.read-only', 'Deleting needs the admin role.'))));
      if (!confirm.hidden) confirm.focus();
    } catch (error) {
      holder.appendChild(h('p.form-error', { role: 'alert' }, error.message));
    }
  });
  return needs('operator', h('span', button, holder));
}

export function renderDryRun(report) {
  const parts = [];
  const changed = report.affected.length;
  parts.push(h('p.summary',
    `${changed} selection${changed === 1 ? '' : 's'} would change; `,
    `${report.newly_failing.length} would newly fail; `,
    `${report.unreachable_members.length} member(s) would become unreachable.`,
    report.truncated ? ' (Only the first selections were compared.)' : ''));
  if (report.newly_failing.length) {
    parts.push(h('div.alert', { role: 'alert' }, h('strong', 'Requests that would newly fail: '),
      report.newly_failing.map((f) => `${f.model} [group ${f.group}${f.team_id ? `, team ${f.team_id}` : ''}] → ${f.outcome}`).join('; ')));
  }
  if (report.unreachable_members.length) {
    parts.push(h('p', h('strong', 'Unreachable members: '),
      report.unreachable_members.map((m) => `#${m.member_id} (${m.upstream_model} on channel ${m.channel_id}${m.deleted ? ', deleted' : ''})`).join(', ')));
  }
  if (report.models_unresolved.length) {
    parts.push(h('p', h('strong', 'Models that stop resolving: '), report.models_unresolved.map((m) => m.model).join(', ')));
  }
  if (report.models_rerouted.length) {
    parts.push(h('p', h('strong', 'Models resolving to another route: '),
      report.models_rerouted.map((m) => `${m.model} (route ${fmt(m.route_before)} → ${fmt(m.route_after)})`).join(', ')));
  }
  if (report.tokens.length) {
    parts.push(h('p', h('strong', 'Tokens served differently: '),
      report.tokens.map((t) => `${t.name} (#${t.token_id})`).join(', ')));
  }
  for (const a of report.affected) {
    parts.push(h('div.affected',
      h('h5', `${a.model} · group ${a.group}${a.team_id ? ` · team ${a.team_id}` : ''}`,
        ` — ${a.outcome_before} → ${a.outcome_after}`,
        a.route_before !== a.route_after ? ` (route ${fmt(a.route_before)} → ${fmt(a.route_after)})` : ''),
      table([
        { title: 'member', render: (m) => `#${m.member_id}` },
        { title: 'channel', key: 'channel_id' },
        { title: 'upstream model', key: 'upstream_model' },
        { title: 'before', render: (m) => (m.before === null ? '—' : bar(m.before, `member ${m.member_id} before`)) },
        { title: 'after', render: (m) => (m.after === null ? '—' : bar(m.after, `member ${m.member_id} after`)) },
        { title: 'reasons after', render: (m) => m.reasons_after.join(', ') || '—' },
      ], a.members, { label: `probabilities for ${a.model}` })));
  }
  const prices = report.prices || [];
  const limits = report.limits || [];
  if (prices.length) {
    parts.push(h('div.moves', h('h5', 'Prices (USD per million tokens)'), table([
      { title: 'price', render: (m) => `#${m.price_id}` },
      { title: 'change', render: (m) => moveKind(m) },
      { title: 'before', render: (m) => priceTerms(m.before) },
      { title: 'after', render: (m) => priceTerms(m.after) },
    ], prices, { label: 'price changes' })));
  }
  if (limits.length) {
    parts.push(h('div.moves', h('h5', 'Limits'), table([
      { title: 'limit', render: (m) => `#${m.limit_id}` },
      { title: 'change', render: (m) => moveKind(m) },
      { title: 'before', render: (m) => limitTerms(m.before) },
      { title: 'after', render: (m) => limitTerms(m.after) },
    ], limits, { label: 'limit changes' })));
  }
  if (!changed && !report.tokens.length) {
    parts.push(h('p.ok', 'No selection would change.',
      prices.length || limits.length ? ' Prices and limits do not change which member is selected; they price and cap the traffic.' : ''));
  }
  return h('div', parts);
}

function moveKind(m) {
  if (!m.before) return 'created';
  if (!m.after) return 'deleted';
  return 'changed';
}

function priceTerms(p) {
  if (!p) return '—';
  return `channel ${p.channel_id} · ${p.model_pattern} · input ${p.input_per_million}, output ${p.output_per_million}, cached input ${p.cached_input_per_million ?? 'as input'}`;
}

/** A limit's terms in words: "token 3: spend 5 USD per day (hard)". */
function limitTerms(l) {
  if (!l) return '—';
  const per = l.window && l.window !== 'none' ? ` per ${l.window}` : '';
  const value = l.metric === 'spend' ? `${l.value} USD` : fmt(l.value);
  const whom = l.scope === 'tag' ? `tag ${l.tag}`
    : l.scope === 'end_user' ? (l.end_user ? `end user ${l.end_user}` : 'each end user')
      : `${l.scope} ${l.scope_id}`;
  return `${whom}: ${l.metric} ${value}${per} (${l.mode})`;
}

export function section(title, ...children) {
  const card = h('section.card', h('h2', title), ...children);
  // A section holding only controls this role may not use (a "New ..." form) is hidden too.
  const shown = children.filter((c) => c && c.nodeType === 1);
  if (shown.length && shown.every((c) => c.hidden)) card.hidden = true;
  return card;
}

export function heading(root, text) {
  const el = h('h1', { tabindex: '-1' }, text);
  root.appendChild(el);
  el.focus();
}

// ---------------------------------------------------------------- channels

const PROVIDERS = ['openai', 'azure', 'anthropic', 'gemini', 'vertex', 'bedrock', 'mock'];
const CHANNEL_FIELDS = [
  { name: 'name', required: true },
  { name: 'provider', type: 'select', options: PROVIDERS, default: 'openai' },
  { name: 'base_url', required: true, help: 'e.g. https://api.openai.com/v1, https://my-resource.openai.azure.com (azure), https://us-central1-aiplatform.googleapis.com (vertex), https://bedrock-runtime.us-east-1.amazonaws.com (bedrock) or mock://sim?failure_rate=0' },
  { name: 'auth', type: 'select', options: ['credentials', 'workload'], default: 'credentials', help: 'workload (azure, bedrock, vertex): no stored secret, the proxies use their own workload identity (a vertex base_url then names its project)' },
  { name: 'status', type: 'select', options: ['enabled', 'disabled'], default: 'enabled' },
  { name: 'auto_ban', type: 'checkbox' },
  { name: 'responses_api', type: 'checkbox', default: true, help: 'openai and azure only: untick for an OpenAI-compatible server without /v1/responses (Responses requests are then sent as Chat Completions)' },
  { name: 'max_concurrency', type: 'number' },
  { name: 'capabilities', type: 'json', help: '{"max_context":…, "streaming":…, "tools":…, "vision":…, "json_mode":…}' },
  { name: 'retry_status_codes', type: 'numlist' },
  { name: 'retry_error_patterns', type: 'list' },
  { name: 'passthrough', type: 'list', help: 'path patterns clients may reach at /passthrough/{name}/… with this channel\'s key, comma-separated (e.g. /v1/fine_tuning/*, /v1/files*); empty: none' },
];

export async function channels(root, params) {
  heading(root, 'Channels');
  const rows = await all('/api/v1/channels');
  const reload = () => { location.hash = `#/channels${params.id ? `/${params.id}` : ''}?t=${Date.now()}`; };
  root.appendChild(section('All channels', table([
    { title: 'id', key: 'id' },
    { title: 'name', render: (c) => h('a', { href: `#/channels/${c.id}` }, c.name) },
    { title: 'provider', key: 'provider' },
    { title: 'auth', key: 'auth' },
    { title: 'status', render: (c) => h(`span.status.status-${c.status}`, c.status) },
    { title: 'base URL', key: 'base_url' },
    { title: 'max concurrency', key: 'max_concurrency' },
  ], rows, { label: 'channels' })));
  if (params.id) {
    const channel = rows.find((c) => String(c.id) === params.id);
    if (channel) await channelDetail(root, channel, reload);
  } else {
    root.appendChild(section('New channel', editForm({
      title: 'Create a channel',
      fields: CHANNEL_FIELDS,
      change: (body) => ({ op: 'create', resource: 'channel', body }),
      save: (body) => api('POST', '/api/v1/channels', body),
      onSaved: (c) => { location.hash = `#/channels/${c.id}`; },
      submitLabel: 'Preview channel',
    })));
  }
}

async function channelDetail(root, channel, reload) {
  const [credentials, events] = await Promise.all([
    all(`/api/v1/channels/${channel.id}/credentials`),
    all(`/api/v1/channels/${channel.id}/events`),
  ]);
  root.appendChild(section(`Channel ${channel.name} (#${channel.id})`,
    editForm({
      title: 'Edit channel',
      fields: CHANNEL_FIELDS,
      initial: channel,
      change: (body) => ({ op: 'patch', resource: 'channel', id: channel.id, body }),
      save: (body) => api('PATCH', `/api/v1/channels/${channel.id}`, body),
      onSaved: reload,
    }),
    deleteButton('Delete channel', { op: 'delete', resource: 'channel', id: channel.id },
      () => api('DELETE', `/api/v1/channels/${channel.id}`), () => { location.hash = '#/channels'; })));
  if (channel.auth === 'workload') {
    root.appendChild(section('Credentials',
      h('p', 'This channel authenticates with the proxies\' workload identity: it stores no secret and takes no credentials.')));
  } else root.appendChild(section('Credentials (secrets are masked)',
    table([
      { title: 'id', key: 'id' },
      { title: 'source', key: 'source' },
      { title: 'secret', render: (c) => h('code', c.secret ?? c.secret_env ?? '—') },
      { title: 'enabled', key: 'enabled' },
      { title: '', render: (c) => h('span',
        needs('admin', h('button', { type: 'button', onclick: async () => { await api('PATCH', `/api/v1/credentials/${c.id}`, { enabled: !c.enabled }); reload(); } }, c.enabled ? 'Disable' : 'Enable')),
        ' ',
        deleteButton('Delete', { op: 'delete', resource: 'credential', id: c.id }, () => api('DELETE', `/api/v1/credentials/${c.id}`), reload)) },
    ], credentials, { label: 'credentials', empty: 'No credentials.' }),
    editForm({
      title: 'Add a credential',
      fields: [
        { name: 'secret', type: 'password', label: 'secret (write-only)' },
        { name: 'secret_env', label: 'or secret_env (variable on the proxies)' },
        { name: 'enabled', type: 'checkbox', default: true },
      ],
      change: (body) => ({ op: 'create', resource: 'credential', parent_id: channel.id, body }),
      save: (body) => api('POST', `/api/v1/channels/${channel.id}/credentials`, body),
      onSaved: reload,
      submitLabel: 'Preview credential',
    })));
  root.appendChild(section('Status events', table([
    { title: 'at', key: 'at' },
    { title: 'from', key: 'from_status' },
    { title: 'to', key: 'to_status' },
    { title: 'reason', key: 'reason' },
    { title: 'actor', key: 'actor' },
  ], events, { label: 'status events', empty: 'No status changes recorded.' })));
}

// ---------------------------------------------------------------- routes and members

const ROUTE_FIELDS = [
  { name: 'model_pattern', required: true, help: 'exact name, or a wildcard with * and ?' },
  { name: 'enabled', type: 'checkbox', default: true },
  { name: 'routing_mode', type: 'select', options: ['auto', 'weighted', 'latency', 'adaptive', 'single'], default: 'auto' },
  { name: 'single_member_id', type: 'number' },
  { name: 'sticky_session', type: 'tristate' },
  { name: 'stable_first', type: 'tristate' },
  { name: 'stable_first_denominator', type: 'number' },
  { name: 'retry_times', type: 'number' },
  { name: 'channel_retry_times', type: 'number' },
  { name: 'cooldown_seconds', type: 'number' },
];

function memberFields(channelsList) {
  return [
    { name: 'channel_id', type: 'select', options: channelsList.map((c) => String(c.id)), label: 'channel_id', help: channelsList.map((c) => `${c.id}: ${c.name}`).join(', ') },
    { name: 'upstream_model', required: true },
    { name: 'group_name', default: 'default' },
    { name: 'priority', type: 'number', default: 0 },
    { name: 'weight', type: 'number', default: 1 },
    { name: 'enabled', type: 'checkbox', default: true },
    { name: 'canary', type: 'checkbox' },
  ];
}

function numericChannel(body) {
  if (typeof body.channel_id === 'string') body.channel_id = Number(body.channel_id);
  return body;
}

export async function routes(root, params) {
  heading(root, 'Routes');
  const rows = await all('/api/v1/routes');
  root.appendChild(section('All routes', table([
    { title: 'id', key: 'id' },
    { title: 'model pattern', render: (r) => h('a', { href: `#/routes/${r.id}` }, r.model_pattern) },
    { title: 'enabled', key: 'enabled' },
    { title: 'mode', key: 'routing_mode' },
    { title: '', render: (r) => h('a', { href: `#/explain?model=${encodeURIComponent(r.model_pattern)}` }, 'Explain') },
  ], rows, { label: 'routes' })));
  const route = params.id && rows.find((r) => String(r.id) === params.id);
  if (!route) {
    root.appendChild(section('New route', editForm({
      title: 'Create a route',
      fields: ROUTE_FIELDS,
      change: (body) => ({ op: 'create', resource: 'route', body }),
      save: (body) => api('POST', '/api/v1/routes', body),
      onSaved: (r) => { location.hash = `#/routes/${r.id}`; },
      submitLabel: 'Preview route',
    })));
    return;
  }
  const reload = () => { location.hash = `#/routes/${route.id}?t=${Date.now()}`; };
  const [members, channelsList] = await Promise.all([all(`/api/v1/routes/${route.id}/members`), all('/api/v1/channels')]);
  const channelName = (id) => (channelsList.find((c) => c.id === id) || {}).name || `#${id}`;
  const trialOut = h('div.trial', { 'aria-live': 'polite' });
  const editHolder = h('div');
  root.appendChild(section(`Route ${route.model_pattern} (#${route.id})`,
    h('p', h('a', { href: `#/explain?model=${encodeURIComponent(route.model_pattern)}` }, 'Explain this route')),
    editForm({
      title: 'Edit route',
      fields: ROUTE_FIELDS,
      initial: route,
      change: (body) => ({ op: 'patch', resource: 'route', id: route.id, body }),
      save: (body) => api('PATCH', `/api/v1/routes/${route.id}`, body),
      onSaved: reload,
    }),
    deleteButton('Delete route', { op: 'delete', resource: 'route', id: route.id },
      () => api('DELETE', `/api/v1/routes/${route.id}`), () => { location.hash = '#/routes'; })));
  root.appendChild(section('Members',
    table([
      { title: 'id', key: 'id' },
      { title: 'channel', render: (m) => channelName(m.channel_id) },
      { title: 'upstream model', key: 'upstream_model' },
      { title: 'group', key: 'group_name' },
      { title: 'priority', key: 'priority' },
      { title: 'weight', key: 'weight' },
      { title: 'enabled', key: 'enabled' },
      { title: 'canary', key: 'canary' },
      { title: '', render: (m) => h('span.row-actions',
        needs('operator', h('button', { type: 'button', 'aria-label': `Edit member ${m.id}`, onclick: () => {
          clear(editHolder).appendChild(editForm({
            title: `Edit member #${m.id}`,
            fields: memberFields(channelsList),
            initial: { ...m, channel_id: String(m.channel_id) },
            change: (body) => ({ op: 'patch', resource: 'member', id: m.id, body: numericChannel(body) }),
            save: (body) => api('PATCH', `/api/v1/members/${m.id}`, numericChannel(body)),
            onSaved: reload,
          }));
          editHolder.querySelector('input, select').focus();
        } }, 'Edit')),
        ' ',
        needs('operator', h('button', { type: 'button', 'aria-label': `Trial call through member ${m.id}`, onclick: async () => {
          clear(trialOut).appendChild(h('p', `Calling member #${m.id}…`));
          try {
            const r = await api('POST', `/api/v1/members/${m.id}/trial`);
            clear(trialOut).appendChild(h(`p.${r.passed ? 'ok' : 'alert'}`,
              `Trial through member #${r.member_id}: ${r.passed ? 'passed' : 'failed'}`,
              r.status ? ` (status ${r.status})` : '', r.failure ? ` — ${r.failure}` : '',
              ` in ${r.latency_ms} ms.`,
              r.cooled_until ? ` Member cooling down until ${new Date(r.cooled_until).toLocaleTimeString()}.` : ''));
          } catch (error) {
            clear(trialOut).appendChild(h('p.alert', error.message));
          }
        } }, 'Trial call')),
        ' ',
        deleteButton('Delete', { op: 'delete', resource: 'member', id: m.id }, () => api('DELETE', `/api/v1/members/${m.id}`), reload)) },
    ], members, { label: 'members', empty: 'No members yet.' }),
    trialOut,
    editHolder,
    editForm({
      title: 'Add a member',
      fields: memberFields(channelsList),
      change: (body) => ({ op: 'create', resource: 'member', parent_id: route.id, body: numericChannel(body) }),
      save: (body) => api('POST', `/api/v1/routes/${route.id}/members`, numericChannel(body)),
      onSaved: reload,
      submitLabel: 'Preview member',
    })));
}

// ---------------------------------------------------------------- tokens

const TOKEN_FIELDS = [
  { name: 'name', required: true },
  { name: 'route_group_name' },
  { name: 'team_id', type: 'number' },
  { name: 'allow_pinning', type: 'checkbox' },
  { name: 'enabled', type: 'checkbox', default: true },
  { name: 'expires_at', nullable: true, help: 'RFC 3339, e.g. 2027-01-31T23:59:59Z (any offset); empty: never expires' },
];

export async function tokens(root, params) {
  heading(root, 'Tokens');
  const rows = await all('/api/v1/tokens');
  const created = h('div', { 'aria-live': 'polite' });
  const reload = () => { location.hash = `#/tokens?t=${Date.now()}`; };
  root.appendChild(created);
  root.appendChild(section('All tokens', table([
    { title: 'id', key: 'id' },
    { title: 'name', render: (t) => h('a', { href: `#/tokens/${t.id}` }, t.name) },
    { title: 'prefix', render: (t) => h('code', t.prefix) },
    { title: 'group', key: 'route_group_name' },
    { title: 'team', key: 'team_id' },
    { title: 'pinning', key: 'allow_pinning' },
    { title: 'enabled', key: 'enabled' },
    { title: 'expires', render: (t) => (t.expires_at ? expiry(t.expires_at) : 'never') },
  ], rows, { label: 'tokens' })));
  const token = params.id && rows.find((t) => String(t.id) === params.id);
  if (token) {
    root.appendChild(section(`Token ${token.name}`, editForm({
      title: 'Edit token',
      fields: TOKEN_FIELDS,
      initial: token,
      change: (body) => ({ op: 'patch', resource: 'token', id: token.id, body }),
      save: (body) => api('PATCH', `/api/v1/tokens/${token.id}`, body),
      onSaved: reload,
    }), deleteButton('Delete token', { op: 'delete', resource: 'token', id: token.id },
      () => api('DELETE', `/api/v1/tokens/${token.id}`), () => { location.hash = '#/tokens'; })));
    return;
  }
  root.appendChild(section('New token', editForm({
    title: 'Create a token',
    fields: TOKEN_FIELDS,
    change: (body) => ({ op: 'create', resource: 'token', body }),
    save: (body) => api('POST', '/api/v1/tokens', body),
    onSaved: async (t) => {
      // Shown once: the API stores only a hash, and this page keeps it nowhere.
      await tokens(clear(root), {});
      root.prepend(h('div.callout#new-token', { role: 'status' },
        h('strong', `Token ${t.name} created. Copy it now; it is shown only once: `),
        h('code.plaintext', t.token)));
    },
    submitLabel: 'Preview token',
  })));
}

/** An expiry instant as the API gives it (UTC), marked when it has passed. */
function expiry(at) {
  const ms = Date.parse(at.replace(/(\.\d{3})\d+/, '$1'));
  const text = at.replace(/\.0+Z$/, 'Z');
  return Number.isFinite(ms) && ms <= Date.now() ? h('span.expired', `${text} (expired)`) : text;
}

// ---------------------------------------------------------------- teams

const TEAM_FIELDS = [
  { name: 'name', required: true },
  { name: 'models', type: 'list', help: 'model patterns, comma-separated' },
  { name: 'members', type: 'numlist', help: 'member ids, comma-separated (empty: all)' },
  { name: 'plan', type: 'json', help: '{"<member id>": {"priority": 1, "weight": 5}}' },
  { name: 'retry_limit', type: 'number' },
  { name: 'disable_failover', type: 'checkbox' },
];

export async function teams(root, params) {
  heading(root, 'Teams');
  const rows = await all('/api/v1/teams');
  const reload = () => { location.hash = `#/teams${params.id ? `/${params.id}` : ''}?t=${Date.now()}`; };
  root.appendChild(section('All teams', table([
    { title: 'id', key: 'id' },
    { title: 'name', render: (t) => h('a', { href: `#/teams/${t.id}` }, t.name) },
    { title: 'models', render: (t) => t.models.join(', ') || '—' },
    { title: 'members', render: (t) => t.members.join(', ') || '—' },
    { title: 'retry limit', key: 'retry_limit' },
    { title: 'failover off', key: 'disable_failover' },
  ], rows, { label: 'teams' })));
  const team = params.id && rows.find((t) => String(t.id) === params.id);
  root.appendChild(section(team ? `Team ${team.name}` : 'New team', editForm({
    title: team ? 'Edit team' : 'Create a team',
    fields: TEAM_FIELDS,
    initial: team || undefined,
    change: (body) => (team ? { op: 'patch', resource: 'team', id: team.id, body } : { op: 'create', resource: 'team', body }),
    save: (body) => (team ? api('PATCH', `/api/v1/teams/${team.id}`, body) : api('POST', '/api/v1/teams', body)),
    onSaved: (t) => { location.hash = `#/teams/${t.id}?t=${Date.now()}`; },
  }), team ? deleteButton('Delete team', { op: 'delete', resource: 'team', id: team.id },
    () => api('DELETE', `/api/v1/teams/${team.id}`), () => { location.hash = '#/teams'; }) : null));
}

// ---------------------------------------------------------------- settings

export async function settings(root) {
  heading(root, 'Settings');
  const current = await api('GET', '/api/v1/settings');
  const fields = Object.entries(current).map(([name, value]) => ({
    name,
    type: typeof value === 'boolean' ? 'checkbox' : typeof value === 'number' ? 'number' : 'json',
  }));
  root.appendChild(section('Global settings', editForm({
    title: 'Edit settings',
    fields,
    initial: current,
    change: (body) => ({ op: 'patch', resource: 'settings', body }),
    save: (body) => api('PATCH', '/api/v1/settings', body),
    onSaved: () => { location.hash = `#/settings?t=${Date.now()}`; },
  })));
}

// ---------------------------------------------------------------- explain

const KNOWN_EXPLAIN = new Set(['model', 'route', 'outcome', 'member_id', 'channel_id', 'via', 'requested_group',
  'route_group', 'group_fallback', 'tier', 'candidates', 'revision', 'seed', 'now_ms', 'health_view']);
const KNOWN_CANDIDATE = new Set(['member_id', 'channel_id', 'channel', 'upstream_model', 'group', 'priority', 'weight',
  'canary', 'eligible', 'reasons', 'cooldown_until', 'latency_factor', 'error_factor', 'score', 'probability',
  'recovering', 'ramp_factor']);

export async function explain(root, params) {
  heading(root, 'Explain');
  const out = h('div#explain-result', { 'aria-live': 'polite' });
  const form = h('form.edit', { 'aria-label': 'Explain a selection' },
    h('div.fields',
      field({ name: 'model', required: true }, params.model || ''),
      field({ name: 'route_group', label: 'route_group (requested group)' }, params.route_group || ''),
      field({ name: 'session', label: 'session key' }, params.session || '')),
    h('p.form-error', { role: 'alert' }),
    h('div.actions', h('button', { type: 'submit' }, 'Explain')));
  const run = async () => {
    clearErrors(form);
    const q = new URLSearchParams();
    for (const name of ['model', 'route_group', 'session']) {
      const v = form.querySelector(`[name="${name}"]`).value.trim();
      if (v) q.set(name, v);
    }
    try {
      const d = await api('GET', `/api/v1/routes/explain?${q}`);
      clear(out).appendChild(renderExplain(d));
    } catch (error) {
      clear(out);
      showError(form, error);
    }
  };
  form.addEventListener('submit', (e) => { e.preventDefault(); run(); });
  root.appendChild(section('Ask the engine', form, out));
  if (params.model) await run();
}

function renderExplain(d) {
  const extra = Object.fromEntries(Object.entries(d).filter(([k]) => !KNOWN_EXPLAIN.has(k)));
  return h('div',
    h('dl.summary-grid',
      h('dt', 'route'), h('dd', d.route ? `${d.route.model_pattern} (#${d.route.id}, ${d.route.routing_mode})` : '—'),
      h('dt', 'outcome'), h('dd.outcome', d.outcome, d.member_id ? ` → member #${d.member_id} via ${d.via}` : ''),
      h('dt', 'requested group'), h('dd', d.requested_group),
      h('dt', 'group used'), h('dd', fmt(d.route_group)),
      h('dt', 'group fallback'), h('dd', d.group_fallback ? 'yes: the requested group has no members' : 'no'),
      h('dt', 'tier'), h('dd', fmt(d.tier)),
      h('dt', 'health view'), h('dd', d.health_view),
      h('dt', 'revision'), h('dd', fmt(d.revision))),
    Object.keys(extra).length ? h('div.extra', h('h3', 'Strategy, canary, stickiness, budget and more'), generic(extra)) : null,
    h('h3', 'Candidates'),
    table([
      { title: 'member', render: (c) => `#${c.member_id}` },
      { title: 'channel', render: (c) => c.channel || `#${c.channel_id}` },
      { title: 'upstream model', key: 'upstream_model' },
      { title: 'group', key: 'group' },
      { title: 'priority', key: 'priority' },
      { title: 'weight', key: 'weight' },
      { title: 'eligible', key: 'eligible' },
      { title: 'reasons', render: (c) => (c.reasons.length ? c.reasons.map((r) => h('span.reason', r)) : '—') },
      { title: 'latency ×', key: 'latency_factor' },
      { title: 'error ×', key: 'error_factor' },
      { title: 'score', key: 'score' },
      { title: 'slow start', render: (c) => (c.recovering ? `ramp ×${Number(c.ramp_factor).toFixed(2)}` : '—') },
      { title: 'probability', render: (c) => bar(c.probability, `member ${c.member_id}`) },
      { title: 'more', render: (c) => {
        const more = Object.fromEntries(Object.entries(c).filter(([k]) => !KNOWN_CANDIDATE.has(k)));
        return Object.keys(more).length ? generic(more) : '—';
      } },
    ], d.candidates, { label: 'candidates', empty: 'No candidates.' }));
}

// ---------------------------------------------------------------- live state

const KNOWN_STATE = new Set(['configured', 'message', 'source', 'connected', 'now_ms', 'cooldowns', 'breakers',
  'in_flight', 'health', 'proxies', 'channels', 'recovering']);

export async function live(root) {
  heading(root, 'Live fleet state');
  const body = h('div#live', { 'aria-live': 'off' });
  root.appendChild(body);
  let state = null;
  let skew = 0;
  const countdowns = () => {
    body.querySelectorAll('[data-until]').forEach((el) => {
      const left = Number(el.dataset.until) - (Date.now() + skew);
      el.textContent = left > 0 ? `${Math.ceil(left / 1000)} s` : 'expired';
    });
  };
  const draw = () => {
    const s = state;
    clear(body);
    if (!s.configured) body.appendChild(h('p.alert', s.message));
    body.appendChild(section('Connected proxies (to this control-plane replica)', table([
      { title: 'client', render: (p) => p.client_id || '(not announced)' },
      { title: 'peer', key: 'peer' },
      { title: 'revision', key: 'revision' },
      { title: 'connected', render: (p) => new Date(p.connected_at_ms).toLocaleTimeString() },
      { title: 'last contact', render: (p) => new Date(p.last_contact_ms).toLocaleTimeString() },
      { title: 'fleet token', key: 'authenticated' },
    ], s.proxies || [], { label: 'connected proxies', empty: 'No proxy is connected to this replica.' })));
    body.appendChild(section('Cooldowns', table([
      { title: 'member', render: (c) => `#${c.member_id}` },
      { title: 'left', render: (c) => h('span.countdown', { dataset: { until: c.until } }, '') },
      { title: 'until', render: (c) => new Date(c.until).toLocaleTimeString() },
    ], s.cooldowns || [], { label: 'cooldowns', empty: 'No member is cooling down.' })));
    body.appendChild(section('Breakers (open)', table([
      { title: 'channel', key: 'channel_id' },
      { title: 'failures', key: 'consecutive_failures' },
      { title: 'tripped', render: (b) => (b.tripped_at ? new Date(b.tripped_at).toLocaleTimeString() : '—') },
      { title: 'reason', key: 'reason' },
    ], s.breakers || [], { label: 'breakers', empty: 'No breaker is open.' })));
    body.appendChild(section('Recovering (slow start after a passed probe)', table([
      { title: 'channel', key: 'channel_id' },
      { title: 'ramp', render: (r) => `×${Number(r.ramp_factor).toFixed(2)}` },
      { title: 'full weight in', render: (r) => h('span.countdown', { dataset: { until: r.until } }, '') },
      { title: 'since', render: (r) => new Date(r.since).toLocaleTimeString() },
    ], s.recovering || [], { label: 'recovering channels', empty: 'No channel is ramping back up.' })));
    body.appendChild(section('In flight', table([
      { title: 'channel', key: 'channel_id' },
      { title: 'in flight', key: 'in_flight' },
    ], s.in_flight || [], { label: 'in flight', empty: 'Nothing in flight.' })));
    body.appendChild(section('Health records', table([
      { title: 'channel', key: 'channel_id' },
      { title: 'upstream model', key: 'upstream_model' },
      { title: 'latency ms', key: 'latency_ms' },
      { title: 'error propensity', key: 'error_propensity' },
    ], s.health || [], { label: 'health records', empty: 'No health records yet.' })));
    const extra = Object.fromEntries(Object.entries(s).filter(([k]) => !KNOWN_STATE.has(k)));
    extra.channels = s.channels;
    body.appendChild(section('Everything else the state holds', generic(extra)));
    countdowns();
  };
  const poll = async () => {
    try {
      state = await api('GET', '/api/v1/state');
      if (state.now_ms) skew = state.now_ms - Date.now();
      draw();
    } catch (error) {
      clear(body).appendChild(h('p.alert', error.message));
    }
  };
  await poll();
  const pollTimer = setInterval(poll, 2000);
  const tick = setInterval(countdowns, 1000);
  return () => { clearInterval(pollTimer); clearInterval(tick); };
}
