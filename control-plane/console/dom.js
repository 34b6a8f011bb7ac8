// Tiny DOM helpers. Everything is built with createElement/textContent, never from HTML text, so
// nothing an API returns can become markup or script.

/** h('div.cls#id', {attr: value, onclick: fn}, ...children) */
export function h(tag, attrs, ...children) {
  const [name, ...rest] = tag.split(/(?=[.#])/);
  const el = document.createElement(name || 'div');
  for (const part of rest) {
    if (part.startsWith('.')) el.classList.add(part.slice(1));
    else if (part.startsWith('#')) el.id = part.slice(1);
  }
  if (attrs && (typeof attrs !== 'object' || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (key === 'value') el.value = value;
    else if (key === 'checked') el.checked = !!value;
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function table(columns, rows, { empty = 'Nothing here yet.', label } = {}) {
  if (!rows.length) return h('p.empty', empty);
  return h('table', label ? { 'aria-label': label } : null,
    h('thead', h('tr', columns.map((c) => h('th', { scope: 'col' }, c.title)))),
    h('tbody', rows.map((row) => h('tr', columns.map((c) => h('td', c.render ? c.render(row) : fmt(row[c.key])))))));
}

export function fmt(value) {
  if (value === null || value === undefined) return '—';
  if (typeof value === 'number') return Number.isInteger(value) ? String(value) : value.toFixed(3);
  if (typeof value === 'boolean') return value ? 'yes' : 'no';
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

/** A horizontal bar for a fraction; its text is the percentage. The fill stops at 100 %, the
 * text does not (a budget overspent shows 140 %). `tone` adds a class (`near`, `over`); `tiny`
 * shows a share above 0 but under 0.1 % as "<0.1%" rather than "0.0%". */
export function bar(p, label, { tone, tiny } = {}) {
  const value = Math.max(0, Number(p) || 0) * 100;
  const text = tiny && value > 0 && value < 0.05 ? '<0.1%' : `${value.toFixed(1)}%`;
  const fill = h('span.bar-fill');
  // Width through the CSSOM (allowed by style-src 'self'; no inline style attribute parsing).
  fill.style.width = `${Math.min(100, value).toFixed(1)}%`;
  const el = h('span.bar', { role: 'img', 'aria-label': `${label || 'probability'} ${text}` },
    fill, h('span.bar-text', text));
  if (tone) el.classList.add(tone);
  return el;
}

/** Renders any JSON value as nested definition lists: unknown fields still show up. */
export function generic(value) {
  if (value === null || typeof value !== 'object') return h('span', fmt(value));
  if (Array.isArray(value)) {
    if (!value.length) return h('span.empty', '(none)');
    if (value.every((v) => v && typeof v === 'object' && !Array.isArray(v))) {
      const keys = [...new Set(value.flatMap((v) => Object.keys(v)))];
      return table(keys.map((k) => ({ title: k, key: k })), value);
    }
    return h('span', value.map(fmt).join(', '));
  }
  return h('dl.generic', Object.entries(value).map(([k, v]) => [h('dt', k), h('dd', generic(v))]));
}
