// Entry point: sign-in, the hash router, and view lifecycle.
import { forget, session, ssoEnabled, ssoLogout, teamOnly, token, TEAM_SECTIONS, whoami } from './api.js';
import { clear, h } from './dom.js';
import * as views from './views.js';
import * as spend from './spend.js';
import { shadows } from './shadows.js';
import { cache } from './cache.js';
import { guardrails } from './guardrails.js';
import { requests } from './requests.js';
import { webhooks } from './webhooks.js';

const ROUTES = {
  channels: views.channels,
  routes: views.routes,
  tokens: views.tokens,
  teams: views.teams,
  limits: spend.limits,
  prices: spend.prices,
  usage: spend.usage,
  budgets: spend.budgets,
  shadows,
  cache,
  guardrails,
  requests,
  webhooks,
  settings: views.settings,
  explain: views.explain,
  live: views.live,
};

const $ = (id) => document.getElementById(id);
let cleanup = null;
let generation = 0;
// A single sign-on session is looked for once per page load (its cookie is HttpOnly: only a
// call can tell), and again only after a sign-in.
let cookieChecked = false;

/** Whether someone is signed in: a token in this tab, or a single sign-on session. */
async function signedIn() {
  if (token.get() || session.csrf) return true;
  if (cookieChecked) return false;
  cookieChecked = true;
  try {
    await whoami({ quiet: true });
    return !!session.csrf;
  } catch {
    forget();
    return false;
  }
}

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, query] = raw.split('?');
  const [name, id] = path.split('/');
  const params = Object.fromEntries(new URLSearchParams(query || ''));
  if (id) params.id = id;
  return { name: name || 'routes', params };
}

async function render() {
  if (cleanup) { cleanup(); cleanup = null; }
  const signed = await signedIn();
  $('sign-in').hidden = signed;
  $('nav').hidden = !signed;
  // A fresh container per render: a view still loading from an earlier render writes into its
  // own, detached container and never into this one.
  const root = h('div');
  clear($('view')).appendChild(root);
  if (!signed) {
    forget();
    $('whoami').textContent = '';
    $('sso').hidden = !(await ssoEnabled());
    $('admin-token').focus();
    return;
  }
  if (!session.role) {
    try { await whoami(); } catch (error) {
      root.appendChild(h('p.alert', { role: 'alert' }, error.message));
      return;
    }
  }
  const scope = teamOnly() ? `, team ${session.team}` : '';
  $('whoami').textContent = `${session.name} (${session.role}${scope})`;
  document.body.dataset.role = session.role;
  const parsed = parseHash();
  const params = parsed.params;
  // An admin of one team sees only its team's sections; any other lands on its tokens.
  const open = (section) => !teamOnly() || TEAM_SECTIONS.includes(section);
  const name = open(parsed.name) ? parsed.name : 'tokens';
  for (const link of document.querySelectorAll('#nav a')) {
    const section = link.getAttribute('href').replace(/^#\//, '');
    link.hidden = !open(section);
    if (section === name) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  const view = ROUTES[name] || ROUTES[teamOnly() ? 'tokens' : 'routes'];
  const mine = ++generation;
  try {
    const done = await view(root, params);
    if (mine !== generation) { if (typeof done === 'function') done(); return; }
    if (typeof done === 'function') cleanup = done;
  } catch (error) {
    if (mine === generation) root.appendChild(h('p.alert', { role: 'alert' }, error.message));
  }
}

$('sign-in-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const value = $('admin-token').value.trim();
  $('sign-in-error').textContent = '';
  token.set(value);
  forget();
  try {
    await whoami();
    $('admin-token').value = '';
    if (!location.hash || location.hash === '#') location.hash = '#/routes'; // renders on hashchange
    else await render();
  } catch (error) {
    token.clear();
    $('sign-in-error').textContent = error.status === 401 ? 'That admin token was not accepted.' : error.message;
    $('admin-token').setAttribute('aria-invalid', 'true');
  }
});

$('sign-out').addEventListener('click', async () => {
  if (session.csrf) await ssoLogout().catch(() => {});
  token.clear();
  forget();
  render();
});

window.addEventListener('switchyard:unauthorized', () => {
  token.clear();
  forget();
  render();
});
window.addEventListener('hashchange', render);
render();
