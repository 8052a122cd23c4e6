// Charts as plain SVG. Every chart has a text summary as its accessible
// name, so nothing is said only by colour or shape.
import { s } from './dom.js';

// bars draws columns of stacked values: columns are {label, values:
// {series: n}}, series [{key, name}] in stacking order (each gets class
// "series-<key>"). width and height are in CSS pixels; labels, when set,
// writes every nth column's label under it and the top value at the left;
// className is added to the chart's classes.
export function bars(columns, series, { width, height, summary, labels = 0, className = '' }) {
  const axis = labels ? 16 : 0;
  const left = labels ? 36 : 0;
  const plot = height - axis;
  const max = Math.max(1, ...columns.map((c) => series.reduce((n, k) => n + (c.values[k.key] || 0), 0)));
  const step = (width - left) / Math.max(columns.length, 1);
  const gap = step > 4 ? 1 : 0;
  const svg = s('svg', {
    class: `chart ${className}`.trim(), role: 'img', 'aria-label': summary,
    viewBox: `0 0 ${width} ${height}`, width, height, preserveAspectRatio: 'none',
  }, s('title', {}, summary));
  if (labels) {
    svg.append(
      s('text', { x: left - 4, y: 10, 'text-anchor': 'end', class: 'axis' }, String(max)),
      s('text', { x: left - 4, y: plot, 'text-anchor': 'end', class: 'axis' }, '0'),
      s('line', { x1: left, x2: width, y1: plot + 0.5, y2: plot + 0.5, class: 'baseline' }));
  }
  columns.forEach((c, i) => {
    let y = plot;
    const x = left + i * step;
    for (const k of series) {
      const n = c.values[k.key] || 0;
      if (n <= 0) continue;
      const hgt = (n / max) * (plot - 2);
      y -= hgt;
      svg.append(s('rect', { x: x + gap / 2, y, width: Math.max(step - gap, 1), height: hgt, class: `series-${k.key}` },
        s('title', {}, `${c.label}: ${n} ${k.name}`)));
    }
    if (labels && i % labels === 0) {
      svg.append(s('text', { x: x + step / 2, y: height - 3, 'text-anchor': 'middle', class: 'axis' }, c.label));
    }
  });
  return svg;
}

// trend draws an adaptive key's hour: its 429s per minute as bars (on
// their own scale) and its effective limit as a line over them, columns
// as limitHistory gives them.
export function trend(columns, { width, height, summary }) {
  const svg = bars(columns, [{ key: 'pushbacks', name: '429s' }], { width, height, summary, className: 'trend' });
  const max = Math.max(1, ...columns.map((c) => c.effective || 0));
  const step = width / Math.max(columns.length, 1);
  const points = columns.flatMap((c, i) => (c.effective === null ? []
    : [`${(i * step).toFixed(1)},${(height - 1 - (c.effective / max) * (height - 3)).toFixed(1)}`, `${((i + 1) * step).toFixed(1)},${(height - 1 - (c.effective / max) * (height - 3)).toFixed(1)}`]));
  if (points.length) svg.append(s('polyline', { points: points.join(' '), class: 'effective' }));
  return svg;
}

// meter draws a concurrency key: in use against its limit, and the jobs
// waiting for it after them, on one scale, with a mark at the limit.
export function meter({ inUse, limit, waiting }, summary) {
  const width = 240;
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
