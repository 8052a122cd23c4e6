// The console's router: #/overview, #/jobs, #/jobs/<id>, #/schedules, #/workers, #/usage, #/admin
// and #/login. Each view draws itself into <main> and returns a function
// that stops what it started (timers, streams) when the operator leaves.
import { call, query, session, ApiError } from './api.js';
import { h, field, replace } from './dom.js';
import * as overview from './overview.js';
import * as jobs from './jobs.js';
import * as job from './job.js';
import * as usage from './usage.js';
import * as schedules from './schedules.js';
import * as workers from './workers.js';
import * as admin from './admin.js';

const main = document.getElementById('main');
let leave = () => {};

function route() {
  const [path, search = ''] = window.location.hash.replace(/^#/, '').split('?');
  const params = new URLSearchParams(search);
  const parts = path.split('/').filter(Boolean);
  if (!session.key() || parts[0] === 'login') return [login, params];
  switch (parts[0]) {
    case 'jobs':
      return parts[1] ? [job.render, decodeURIComponent(parts[1])] : [jobs.render, params];
    case 'schedules':
      return [schedules.render, params];
    case 'workers':
      return [workers.render, params];
    case 'usage':
      return [usage.render, params];
    case 'admin':
      return [session.admin() ? admin.render : overview.render, params];
    default:
      return [overview.render, params];
  }
}

function show() {
  leave();
  const signedIn = Boolean(session.key());
  document.getElementById('nav').hidden = !signedIn;
  document.getElementById('who').hidden = !signedIn;
  document.getElementById('nav-admin').hidden = !session.admin();
  document.getElementById('tenant').textContent = signedIn ? `tenant: ${session.tenant()}` : '';
  const here = window.location.hash.split('?')[0];
  for (const a of document.querySelectorAll('#nav a')) {
    if (here.startsWith(a.getAttribute('href'))) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const [view, arg] = route();
  replace(main);
  leave = view(main, arg) || (() => {});
}

// login asks for an API key and checks it by reading the caller's own
// usage for today, whose answer names the key's tenant.
function login(root) {
  const input = h('input', { type: 'password', name: 'key', autocomplete: 'off', required: true, id: 'key' });
  const error = h('p', { class: 'message', role: 'alert' });
  const form = h('form', { class: 'login', 'aria-labelledby': 'login-title' },
    h('h1', { id: 'login-title' }, 'Sign in'),
    h('p', {}, 'Use an API key of your tenant (LEASEHOLD_API_KEYS); the admin tenant sees every tenant. ',
      'The key stays in this tab only.'),
    field('API key', input),
    h('button', { type: 'submit' }, 'Sign in'),
    error);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const key = input.value.trim();
    const today = new Date().toISOString().slice(0, 10);
    try {
      const u = await call('GET', `/v1/usage${query({ from: today, to: today })}`, undefined, key);
      session.save(key, u.tenant);
      if (window.location.hash === '#/overview') show();
      else window.location.hash = '#/overview'; // hashchange shows it
    } catch (err) {
      error.className = 'message error';
      error.textContent = err instanceof ApiError && err.status === 401 ? 'That key is not known to this API.' : `Sign-in failed: ${err.message}`;
    }
  });
  root.append(form);
  input.focus();
}

document.getElementById('logout').addEventListener('click', () => {
  session.clear();
  window.location.hash = '#/login';
});
window.addEventListener('hashchange', show);
show();
