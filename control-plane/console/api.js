// The admin API client. The admin token lives in this tab's sessionStorage only: never in
// localStorage, a cookie or a URL, and it is gone when the tab closes. A person signed in through
// single sign-on holds no token: the browser sends the session's HttpOnly cookie, and every write
// carries the session's CSRF token (from whoami) in `x-switchyard-csrf`.

const KEY = 'switchyard.admin_token';

export const token = {
  get: () => sessionStorage.getItem(KEY),
  set: (value) => sessionStorage.setItem(KEY, value),
  clear: () => sessionStorage.removeItem(KEY),
};

export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.param = error.param || null;
    this.code = error.code || null;
  }
}

export async function api(method, path, body, { quiet = false } = {}) {
  const headers = { 'x-switchyard-actor': 'console' };
  if (token.get()) headers.Authorization = `Bearer ${token.get()}`;
  else if (session.csrf && method !== 'GET') headers['x-switchyard-csrf'] = session.csrf;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
    credentials: 'same-origin',
  });
  const text = await response.text();
  let parsed = null;
  if (text) {
    try { parsed = JSON.parse(text); } catch { parsed = null; }
  }
  if (response.status === 401 && !quiet) {
    window.dispatchEvent(new CustomEvent('switchyard:unauthorized'));
  }
  if (!response.ok) throw new ApiError(response.status, parsed);
  return parsed;
}

/** Every page of a list endpoint. */
export async function all(path) {
  const rows = [];
  let cursor = '';
  for (let i = 0; i < 100; i += 1) {
    const sep = path.includes('?') ? '&' : '?';
    const page = await api('GET', `${path}${sep}limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    rows.push(...page.data);
    if (!page.next_cursor) break;
    cursor = page.next_cursor;
  }
  return rows;
}

export const dryRun = (changes) => api('POST', '/api/v1/dry-run', { changes });

// Who is signed in (`GET /api/v1/whoami`): the admin token's name, role and team (`null`: the
// whole fleet). The console hides what the role or the team cannot use; the API refuses it
// anyway (403, or 404 for another team's resource), so this is convenience, not security.
const RANK = { viewer: 1, operator: 2, admin: 3 };
export const session = { name: null, role: null, csrf: null, team: null };

export async function whoami({ quiet = false } = {}) {
  const me = await api('GET', '/api/v1/whoami', undefined, { quiet });
  session.name = me.name;
  session.role = me.role;
  session.csrf = me.csrf_token || null;
  session.team = me.team_id ?? null;
  return me;
}

export function forget() {
  session.name = null;
  session.role = null;
  session.team = null;
  session.csrf = null;
}

/** Whether single sign-on is on (the sign-in page then offers it). */
export async function ssoEnabled() {
  try {
    const response = await fetch('/console/sso/status', { cache: 'no-store' });
    return response.ok && (await response.json()).enabled === true;
  } catch {
    return false;
  }
}

/** Ends the single sign-on session (its cookie goes with it). */
export async function ssoLogout() {
  await fetch('/console/sso/logout', {
    method: 'POST',
    headers: { 'x-switchyard-csrf': session.csrf || '' },
    credentials: 'same-origin',
    cache: 'no-store',
  });
}

/** The console sections an admin limited to one team may open (the rest are the fleet's). */
export const TEAM_SECTIONS = ['tokens', 'teams', 'limits', 'usage', 'budgets', 'cache', 'requests'];

/** Whether the signed-in token administers one team only. */
export const teamOnly = () => session.team !== null;

/** Whether the signed-in token's role is at least `role` (viewer < operator < admin). */
export const allowed = (role) => (RANK[session.role] || 0) >= RANK[role];

/**
 * Marks `element` as needing `role`: hidden (and inert) for a lower role. Returns it.
 * Every control that writes goes through this, so a viewer sees the data and no buttons.
 */
export function needs(role, element) {
  element.dataset.needs = role;
  if (!allowed(role)) {
    element.hidden = true;
    if ('disabled' in element) element.disabled = true;
  }
  return element;
}
