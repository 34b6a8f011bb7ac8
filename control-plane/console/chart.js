// A stacked bar chart drawn as inline SVG by the console itself: no chart library, no CDN. Every
// element is made with createElementNS and its text with textContent; colours come from the
// stylesheet's series classes (`.s0` … `.s8`), never from a style attribute, so the page's
// Content-Security-Policy (style-src 'self', no inline style) holds.
import { h } from './dom.js';

const NS = 'http://www.w3.org/2000/svg';
/** Series beyond this many are summed into one "other" series. */
export const MAX_SERIES = 8;

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== undefined && value !== null) el.setAttribute(key, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** A round step (1, 2 or 5 × 10ⁿ) giving about `count` intervals up to `max`. */
export function niceStep(max, count = 4) {
  if (!(max > 0)) return 1;
  const raw = max / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const fraction = raw / power;
  const nice = fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10;
  return nice * power;
}

/** A tick value with just the decimals its step needs. */
export function tickText(value, step) {
  const decimals = Math.max(0, -Math.floor(Math.log10(step)));
  return value.toFixed(Math.min(decimals, 12));
}

/**
 * Stacked bars: one bar per bucket, one coloured segment per series.
 *
 * buckets: [{ label, title }] in time order; series: [{ name, values: [number per bucket],
 * color?: series class index (default: its position), total?: legend text }];
 * format: value → text (tooltips and legend totals); label: what the chart shows (its accessible
 * name). Returns a <figure> holding the SVG and its legend.
 */
export function stackedBars({ buckets, series, format = String, label, axis = '' }) {
  const W = 900;
  const H = 280;
  const left = 72;
  const right = 12;
  const top = 14;
  const bottom = 34;
  const plotW = W - left - right;
  const plotH = H - top - bottom;
  const stacks = buckets.map((_, i) => series.reduce((sum, s) => sum + (s.values[i] || 0), 0));
  const peak = Math.max(0, ...stacks);
  const step = niceStep(peak);
  const max = peak > 0 ? Math.ceil(peak / step) * step : step * 4;
  const y = (v) => top + plotH - (v / max) * plotH;
  const slot = plotW / Math.max(1, buckets.length);
  const barW = Math.max(1, slot * 0.72);

  const titleId = `chart-${Math.random().toString(36).slice(2, 8)}`;
  const root = svg('svg', {
    viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-labelledby': titleId, class: 'chart-svg',
    preserveAspectRatio: 'xMidYMid meet',
  }, svg('title', { id: titleId }, label));

  const grid = svg('g', { class: 'grid' });
  for (let v = 0; v <= max + step / 2; v += step) {
    grid.appendChild(svg('line', { x1: left, x2: W - right, y1: y(v), y2: y(v) }));
    grid.appendChild(svg('text', { x: left - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'tick' }, tickText(v, step)));
  }
  if (axis) {
    grid.appendChild(svg('text', { x: 12, y: top + plotH / 2, class: 'axis-label', 'text-anchor': 'middle',
      transform: `rotate(-90 12 ${top + plotH / 2})` }, axis));
  }
  root.appendChild(grid);

  const bars = svg('g', { class: 'segments' });
  buckets.forEach((bucket, i) => {
    let base = 0;
    const x = left + i * slot + (slot - barW) / 2;
    series.forEach((s, k) => {
      const v = s.values[i] || 0;
      if (!(v > 0)) return;
      const y0 = y(base);
      const y1 = y(base + v);
      base += v;
      bars.appendChild(svg('rect', {
        class: `seg s${s.color ?? k}`, x: x.toFixed(2), y: y1.toFixed(2), width: barW.toFixed(2),
        height: Math.max(0.5, y0 - y1).toFixed(2), 'data-series': s.name, 'data-bucket': bucket.title,
      }, svg('title', null, `${s.name} · ${bucket.title}: ${format(v)}`)));
    });
  });
  root.appendChild(bars);

  // At most about a dozen time labels, evenly spaced.
  const every = Math.max(1, Math.ceil(buckets.length / 12));
  const xAxis = svg('g', { class: 'x-axis' },
    svg('line', { x1: left, x2: W - right, y1: top + plotH, y2: top + plotH }));
  buckets.forEach((bucket, i) => {
    if (i % every) return;
    xAxis.appendChild(svg('text', { x: (left + i * slot + slot / 2).toFixed(2), y: H - bottom + 18, 'text-anchor': 'middle', class: 'tick' }, bucket.label));
  });
  root.appendChild(xAxis);

  const legend = h('ul.legend', { 'aria-label': `legend: ${label}` },
    series.map((s, k) => h('li', h(`span.swatch.s${s.color ?? k}`, { 'aria-hidden': 'true' }), h('span.legend-name', s.name),
      h('span.legend-total', s.total ?? format(s.values.reduce((a, b) => a + (b || 0), 0))))));
  return h('figure.chart', root, legend);
}
