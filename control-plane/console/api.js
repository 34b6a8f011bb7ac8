// The admin API client. The admin token lives in this tab's sessionStorage only: never in
// localStorage, a cookie or a URL, and it is gone when the tab closes.

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

export async function api(method, path, body) {
  const headers = { Authorization: `Bearer ${token.get() || ''}`, 'x-switchyard-actor': 'console' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
  });
  const text = await response.text();
  let parsed = null;
  if (text) {
    try { parsed = JSON.parse(text); } catch { parsed = null; }
  }
  if (response.status === 401) {
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

// Who is signed in (`GET /api/v1/whoami`): the admin token's name and role. The console hides
// what the role cannot do; the API refuses it anyway (403), so this is convenience, not security.
const RANK = { viewer: 1, operator: 2, admin: 3 };
export const session = { name: null, role: null };

export async function whoami() {
  const me = await api('GET', '/api/v1/whoami');
  session.name = me.name;
  session.role = me.role;
  return me;
}

export function forget() {
  session.name = null;
  session.role = null;
}

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
