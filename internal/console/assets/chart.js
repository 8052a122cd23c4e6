// Charts as plain SVG, each with a title, a legend, a value axis with its
// unit and a time axis with its zone. Every chart has a text summary as
// its accessible name, so nothing is said only by colour or shape.
import { s } from './dom.js';

const top = 58; // the title's, the legend's and the units' lines
const bottom = 34; // the column labels and the time axis' name
const left = 44; // the value axis' numbers
const right = 44; // the second value axis, when there is one

// fit is the width a chart of at most max pixels gets in the page now:
// on a phone it is drawn narrower rather than scaled down.
export function fit(max) {
  return Math.max(260, Math.min(max, document.getElementById('main').clientWidth - 48));
}

// bars draws columns of stacked values: columns are {label, values:
// {series: n}}, series [{key, name}] in stacking order (each gets class
// "series-<key>"). width and height are in CSS pixels; title heads it,
// unit names the values, axis the columns (with their zone); every
// labels-th column's label is written under it. line, when set, is a
// second series drawn as a line on its own axis at the right:
// {values: [n or null per column], name}.
export function bars(columns, series, { width, height, title, unit, axis, summary, labels = 1, line = null, className = '' }) {
  const plot = { x: left, y: top, w: width - left - (line ? right : 8), h: height - top - bottom };
  const max = nice(Math.max(...columns.map((c) => series.reduce((n, k) => n + (c.values[k.key] || 0), 0))));
  const step = plot.w / Math.max(columns.length, 1);
  const gap = step > 4 ? 1 : 0;
  const svg = s('svg', {
    class: `chart ${className}`.trim(), role: 'img', 'aria-label': summary,
    viewBox: `0 0 ${width} ${height}`, width, height,
  }, s('title', {}, summary),
  s('text', { x: 0, y: 14, class: 'chart-title' }, title));
  legend(svg, [...series.map((k) => ({ cls: `series-${k.key}`, name: k.name })), ...(line ? [{ cls: 'effective', name: line.name, line: true }] : [])]);
  valueAxis(svg, plot, max, 'start', unit);
  columns.forEach((c, i) => {
    let y = plot.y + plot.h;
    const x = plot.x + i * step;
    for (const k of series) {
      const n = c.values[k.key] || 0;
      if (n <= 0) continue;
      const hgt = (n / max) * plot.h;
      y -= hgt;
      svg.append(s('rect', { x: x + gap / 2, y, width: Math.max(step - gap, 1), height: hgt, class: `series-${k.key}` },
        s('title', {}, `${c.label}: ${n} ${k.name}`)));
    }
    if (i % labels === 0) {
      svg.append(s('text', { x: x + step / 2, y: plot.y + plot.h + 14, 'text-anchor': 'middle', class: 'axis' }, c.label));
    }
  });
  svg.append(s('text', { x: plot.x + plot.w / 2, y: height - 4, 'text-anchor': 'middle', class: 'axis-title' }, axis));
  if (line) {
    const lmax = nice(Math.max(...line.values.map((v) => v || 0)));
    valueAxis(svg, { ...plot, x: plot.x + plot.w }, lmax, 'end', line.name, false);
    const at = (v) => (plot.y + plot.h - (v / lmax) * plot.h).toFixed(1);
    const points = line.values.flatMap((v, i) => (v === null ? []
      : [`${(plot.x + i * step).toFixed(1)},${at(v)}`, `${(plot.x + (i + 1) * step).toFixed(1)},${at(v)}`]));
    if (points.length) svg.append(s('polyline', { points: points.join(' '), class: 'effective' }));
  }
  return svg;
}

// valueAxis writes 0, half and max beside the plot, with grid lines when
// grid, and the unit above the numbers.
function valueAxis(svg, plot, max, side, unit, grid = true) {
  const x = side === 'start' ? plot.x - 6 : plot.x + 6;
  const anchor = side === 'start' ? 'end' : 'start';
  for (const v of max >= 2 ? [0, max / 2, max] : [0, max]) {
    const y = plot.y + plot.h - (v / max) * plot.h;
    svg.append(s('text', { x, y: y + 4, 'text-anchor': anchor, class: 'axis' }, String(v)));
    if (grid) svg.append(s('line', { x1: plot.x, x2: plot.x + plot.w, y1: y + 0.5, y2: y + 0.5, class: v === 0 ? 'baseline' : 'grid' }));
  }
  svg.append(s('text', { x: side === 'start' ? 0 : plot.x + 40, y: plot.y - 8, 'text-anchor': side === 'start' ? 'start' : 'end', class: 'axis-title' }, unit));
}

// legend names each series after a swatch, on the line under the title.
function legend(svg, entries) {
  let x = 0;
  for (const e of entries) {
    svg.append(e.line
      ? s('line', { x1: x, x2: x + 12, y1: 26, y2: 26, class: `swatch ${e.cls}` })
      : s('rect', { x, y: 21, width: 10, height: 10, class: `swatch ${e.cls}` }),
    s('text', { x: x + 15, y: 30, class: 'axis' }, e.name));
    x += 24 + e.name.length * 6.5;
  }
}

// nice rounds a chart's top value up to 1, 2 or 5 times a power of ten,
// so that its half is a round number too; at least 1.
function nice(n) {
  if (!(n > 1)) return 1;
  const p = 10 ** Math.floor(Math.log10(n));
  return [1, 2, 5, 10].map((m) => m * p).find((v) => v >= n);
}

// meter draws a concurrency key: in use against its limit, and the jobs
// waiting for it after them, on one scale, with a mark at the limit.
export function meter({ inUse, limit, waiting }, summary) {
  const width = 160;
  const height = 18;
  const scale = Math.max(limit, inUse + waiting, 1);
  const x = (n) => (n / scale) * width;
  return s('svg', { class: 'meter', role: 'img', 'aria-label': summary, viewBox: `0 0 ${width} ${height}`, width, height, preserveAspectRatio: 'none' },
    s('title', {}, summary),
    s('rect', { x: 0, y: 3, width, height: 12, class: 'track' }),
    s('rect', { x: 0, y: 3, width: x(inUse), height: 12, class: inUse >= limit ? 'full' : 'used' }),
    s('rect', { x: x(inUse), y: 3, width: x(waiting), height: 12, class: 'waiting' }),
    s('line', { x1: x(limit), x2: x(limit), y1: 0, y2: height, class: 'limit' }));
}
