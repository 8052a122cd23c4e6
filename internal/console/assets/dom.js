// Every element the console shows is built here. Text, tenant data above
// all, goes in as text nodes: nothing is ever parsed as HTML.

const SVG = 'http://www.w3.org/2000/svg';

// h builds an HTML element: props are attributes, except on* functions
// (event listeners); children are nodes, strings (as text) or arrays of
// them; null, undefined and false are skipped.
export function h(tag, props, ...children) {
  return build(document.createElement(tag), props, children);
}

// s builds an SVG element the same way.
export function s(tag, props, ...children) {
  return build(document.createElementNS(SVG, tag), props, children);
}

function build(el, props, children) {
  for (const [name, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (typeof value === 'function' && name.startsWith('on')) {
      el.addEventListener(name.slice(2), value);
    } else {
      el.setAttribute(name, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// replace empties el and fills it with children.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// time shows an RFC 3339 time as "YYYY-MM-DD HH:MM:SS" in zone (an IANA
// name), followed by the zone's name, or "—".
export function time(t, zone = 'UTC') {
  if (!t) return '—';
  const d = t instanceof Date ? t : new Date(t);
  if (Number.isNaN(d.getTime())) return '—';
  if (!clocks.has(zone)) {
    // Swedish writes dates and times as ISO 8601 does.
    clocks.set(zone, new Intl.DateTimeFormat('sv-SE', {
      timeZone: zone, year: 'numeric', month: '2-digit', day: '2-digit',
      hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23',
    }));
  }
  return `${clocks.get(zone).format(d)} ${zone}`;
}

const clocks = new Map(); // a formatter per zone

// json shows a JSON value indented, or "—" for null.
export function json(v) {
  return v === null || v === undefined ? '—' : JSON.stringify(v, null, 2);
}

// badge shows a job state.
export function badge(state) {
  return h('span', { class: `badge state-${state}` }, state);
}

// table builds a table from column headings and rows of cells, in a
// wrapper that scrolls sideways on a wide table; on a narrow screen each
// row becomes a card whose cells are labelled by their headings
// (data-label). rowProps(i), when given, sets the attributes of row i.
export function table(caption, headings, rows, rowProps = () => ({})) {
  return h('div', { class: 'scroll' },
    h('table', {},
      caption ? h('caption', {}, caption) : null,
      h('thead', {}, h('tr', {}, headings.map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, rows.map((cells, i) => h('tr', rowProps(i),
        cells.map((c, j) => h('td', { 'data-label': typeof headings[j] === 'string' ? headings[j] : null }, c)))))));
}

// field is a labelled form control: an input unless control is given.
export function field(label, control) {
  return h('label', { class: 'field' }, h('span', {}, label), control);
}

// select builds a select of options (value, or [value, text]).
export function select(name, options, selected) {
  return h('select', { name },
    options.map((o) => {
      const [value, text] = Array.isArray(o) ? o : [o, o];
      return h('option', { value, selected: value === selected }, text);
    }));
}

// message shows the outcome of an action in a live region.
export function message(el, text, kind = 'ok') {
  el.className = `message ${kind}`;
  el.textContent = text;
}
