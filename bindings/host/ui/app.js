// app.js -- the duroxide-lua web console: views over the JSON API (/api/...), chosen by the
// address's #fragment. Everything from the store is put on the page as text (never as HTML).
'use strict';

const REFRESH_MS = 3000;
let overview = { read_only: false };
let refreshTimer = null;

// {===== helpers =====}

// What the user typed into form fields, by field name: the views are rebuilt on every refresh,
// and a field given a 'keep' name gets its typed value back instead of losing it.
const drafts = {};

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'keep') {
      const prop = el.type === 'checkbox' || attrs.type === 'checkbox' ? 'checked' : 'value';
      el.addEventListener(prop === 'checked' ? 'change' : 'input', () => { drafts[v] = el[prop]; });
      queueMicrotask(() => { if (v in drafts) el[prop] = drafts[v]; });
      continue;
    }
    if (k === 'class') el.className = v;
    else if (k === 'style') Object.assign(el.style, v); // CSSOM: allowed by the page's CSP
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

async function api(path, body) {
  const opts = body === undefined ? {} : {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  };
  const res = await fetch('/api/' + path, opts);
  let data = {};
  try { data = await res.json(); } catch (e) { data = { error: res.statusText }; }
  if (!res.ok) throw new Error(data.error || ('HTTP ' + res.status));
  return data;
}

function q(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') u.set(k, v);
  return u.toString();
}

function when(ms) {
  if (!ms) return '';
  const d = new Date(ms);
  return d.toISOString().replace('T', ' ').replace('Z', '');
}

function span(ms) {
  if (ms === undefined || ms === null) return '';
  const neg = ms < 0; ms = Math.abs(ms);
  let s;
  if (ms < 1000) s = ms + ' ms';
  else if (ms < 60000) s = (ms / 1000).toFixed(1) + ' s';
  else if (ms < 3600000) s = (ms / 60000).toFixed(1) + ' min';
  else s = (ms / 3600000).toFixed(1) + ' h';
  return neg ? '-' + s : s;
}

function json(v) { return v === undefined ? '' : JSON.stringify(v, null, 2); }

function badge(status) { return h('span', { class: 'status s-' + status, 'data-status': status }, status); }

function flash(msg, isError) {
  const el = document.getElementById('flash');
  el.textContent = msg;
  el.className = 'flash ' + (isError ? 'error' : 'ok');
  clearTimeout(flash.t);
  flash.t = setTimeout(() => { el.className = 'flash hidden'; }, 6000);
}

function table(headers, rows, attrs) {
  return h('table', attrs || {},
    h('thead', {}, h('tr', {}, headers.map((x) => h('th', {}, x)))),
    h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: headers.length, class: 'muted' }, 'none'))));
}

function instLink(id) { return h('a', { href: '#/instance/' + encodeURIComponent(id), class: 'mono' }, id); }

function section(title, ...body) { return h('section', {}, h('h2', {}, title), ...body); }

// {===== views =====}

const views = {};
let listState = { status: '', name: '', cursors: [null] };

views.instances = async function (root) {
  const page = listState.cursors[listState.cursors.length - 1];
  const data = await api('instances?' + q({ status: listState.status, name: listState.name, limit: 25, after: page }));
  const nameIn = h('input', { name: 'name', placeholder: 'orchestration name', value: listState.name, keep: 'filter-name', 'data-test': 'filter-name' });
  // A status applies as soon as it is picked.
  const statusSel = h('select', { name: 'status', 'data-test': 'filter-status', onchange: () => {
    listState = { status: statusSel.value, name: nameIn.value.trim(), cursors: [null] };
    render();
  } }, ['', 'Running', 'Completed', 'Failed', 'Pending'].map((s) => h('option', { value: s, selected: s === listState.status }, s || 'any status')));
  const form = h('form', { class: 'filters', onsubmit: (e) => {
    e.preventDefault();
    listState = { status: statusSel.value, name: nameIn.value.trim(), cursors: [null] };
    render();
  } }, statusSel, nameIn, h('button', { type: 'submit' }, 'Filter'));
  const rows = data.instances.map((i) => h('tr', { 'data-instance': i.instance_id },
    h('td', {}, instLink(i.instance_id)), h('td', {}, i.orchestration || ''), h('td', {}, badge(i.status)),
    h('td', { class: 'num' }, i.execution_id || ''), h('td', {}, when(i.created_at_ms)), h('td', {}, when(i.updated_at_ms))));
  const pager = h('div', { class: 'pager' },
    h('button', { disabled: listState.cursors.length === 1, onclick: () => { listState.cursors.pop(); render(); } }, '< Newer'),
    h('span', { class: 'muted' }, 'page ' + listState.cursors.length),
    h('button', { disabled: !data.next, 'data-test': 'next-page', onclick: () => { listState.cursors.push(data.next); render(); } }, 'Older >'));
  root.replaceChildren(h('h1', {}, 'Instances'), form,
    table(['Instance', 'Orchestration', 'Status', 'Execution', 'Created', 'Updated'], rows, { 'data-test': 'instances' }), pager);
};

// A history as a timeline: each event at its time since the start; work that was scheduled
// and finished (activities, timers, sub-orchestrations) as a bar with its duration.
function timeline(events) {
  if (!events.length) return h('p', { class: 'muted' }, 'no history yet');
  const t0 = events[0].timestamp_ms;
  const tEnd = Math.max(t0 + 1, ...events.map((e) => e.timestamp_ms));
  const done = {};
  for (const e of events) if (e.source_event_id) done[e.source_event_id] = e;
  const rows = events.map((e) => {
    const end = done[e.event_id];
    const left = Math.min(99.5, (100 * (e.timestamp_ms - t0)) / (tEnd - t0)); // the last event stays visible
    const dur = end ? end.timestamp_ms - e.timestamp_ms : null;
    const width = end ? Math.max(0.5, (100 * dur) / (tEnd - t0)) : 0.5;
    const detail = [e.name, e.instance, e.session_id && ('session ' + e.session_id), e.reason,
      e.error && (e.error.kind + ': ' + e.error.message),
      e.data !== undefined && JSON.stringify(e.data).slice(0, 120)].filter(Boolean).join(' · ');
    return h('tr', { 'data-event': e.type },
      h('td', { class: 'num' }, e.event_id), h('td', { class: 'num' }, '+' + span(e.timestamp_ms - t0)),
      h('td', {}, e.type), h('td', { class: 'detail' }, detail),
      h('td', { class: 'num' }, dur === null ? '' : span(dur)),
      h('td', { class: 'bar' }, h('div', { class: 'bar-track' }, h('div', {
        class: 'bar-fill k-' + e.type, style: { left: left.toFixed(2) + '%', width: Math.min(width, 100 - left).toFixed(2) + '%' },
      }))));
  });
  return table(['#', 'At', 'Event', 'Detail', 'Took', 'Timeline'], rows, { class: 'timeline', 'data-test': 'history' });
}

function actionForms(inst) {
  if (overview.read_only) return h('p', { class: 'muted' }, 'Actions are off: the console runs with --read-only.');
  const id = inst.instance_id;
  const act = async (path, body, what) => {
    try {
      await api(path, body);
      for (const k of Object.keys(drafts)) if (k.startsWith('act-')) delete drafts[k];
      flash(what + ': done');
      render();
    } catch (e) { flash(what + ': ' + e.message, true); }
  };
  const evName = h('input', { placeholder: 'event name', 'data-test': 'raise-event', required: true, keep: 'act-event' });
  const evData = h('textarea', { placeholder: 'data (JSON, empty = null)', rows: 2, 'data-test': 'raise-data', keep: 'act-data' });
  const raise = h('form', { class: 'action', onsubmit: (e) => {
    e.preventDefault();
    let data;
    const text = evData.value.trim();
    if (text) { try { data = JSON.parse(text); } catch (err) { flash('raise: data is not JSON: ' + err.message, true); return; } }
    act('raise', data === undefined ? { id, event: evName.value } : { id, event: evName.value, data }, 'raise ' + evName.value);
  } }, h('strong', {}, 'Raise event'), evName, evData, h('button', { type: 'submit', 'data-test': 'raise' }, 'Raise'));
  const reason = h('input', { placeholder: 'reason (optional)', 'data-test': 'reason', keep: 'act-reason' });
  const withReason = () => (reason.value.trim() ? { id, reason: reason.value.trim() } : { id });
  const force = h('input', { type: 'checkbox', 'data-test': 'force', keep: 'act-force' });
  const stop = h('div', { class: 'action' }, h('strong', {}, 'Stop or remove'), reason,
    h('button', { 'data-test': 'cancel', onclick: () => act('cancel', withReason(), 'cancel') }, 'Cancel'),
    h('button', { class: 'danger', 'data-test': 'terminate', onclick: () => act('terminate', withReason(), 'terminate') }, 'Terminate'),
    h('label', {}, force, ' force'),
    h('button', { class: 'danger', 'data-test': 'delete', onclick: async () => {
      try { await api('delete', { id, force: force.checked }); flash('deleted ' + id); location.hash = '#/instances'; } catch (e) { flash('delete: ' + e.message, true); }
    } }, 'Delete'));
  return h('div', { class: 'actions' }, raise, stop);
}

// The execution whose history the instance page shows (null: the current one).
let shownExecution = { id: null, execution: null };

views.instance = async function (root, id) {
  const inst = await api('instance?' + q({ id }));
  if (shownExecution.id !== id) { // another instance: forget what was typed for the last one
    shownExecution = { id, execution: null };
    for (const k of Object.keys(drafts)) if (k.startsWith('act-')) delete drafts[k];
  }
  const exec = shownExecution.execution;
  let hist = { events: [] };
  try { hist = await api('history?' + q({ id, execution: exec })); } catch (e) { /* queued: no history yet */ }
  // An instance that continued as new has older executions: pick one to see its history.
  const execs = (inst.executions || []).map((e) => e.execution_id).reverse();
  const execPicker = execs.length > 1 ? h('select', { 'data-test': 'execution', onchange: (e) => {
    shownExecution.execution = e.target.value === String(inst.execution_id) ? null : e.target.value;
    render();
  } }, execs.map((n) => h('option', { value: n, selected: String(n) === String(exec || inst.execution_id) }, 'execution ' + n))) : null;
  const kv = (k, v) => (v === undefined || v === null || v === '' ? null : h('tr', {}, h('th', {}, k), h('td', {}, v)));
  const lock = (x) => (x.locked_by ? x.locked_by + ' until ' + when(x.locked_until_ms) : x.locked_until_ms ? 'until ' + when(x.locked_until_ms) : '');
  const row = (...cells) => h('tr', {}, cells.map((c) => h('td', {}, c)));
  const pending = [
    ...(inst.pending_activities || []).map((a) => row('activity', a.name, a.attempt, when(a.visible_at_ms), lock(a), a.session_id || '')),
    ...(inst.pending_timers || []).map((t) => row('timer', '#' + t.timer_id, '', 'fires ' + when(t.fire_at_ms), '', '')),
    ...(inst.subscribed_events || []).map((e) => row('event', e.name + (e.waiting > 1 ? ' ×' + e.waiting : ''), '', '', '', '')),
    ...(inst.queued_messages || []).map((m) => row('message', m.type + (m.name ? ' ' + m.name : ''), m.attempt, when(m.visible_at_ms), lock(m), '')),
  ];
  const backoff = inst.start_backoff;
  root.replaceChildren(
    h('h1', {}, 'Instance ', h('span', { class: 'mono' }, inst.instance_id), ' ', badge(inst.status)),
    h('table', { class: 'kv', 'data-test': 'summary' }, h('tbody', {},
      kv('Orchestration', inst.orchestration), kv('Version', inst.version), kv('Execution', inst.execution_id || null),
      kv('Created', when(inst.created_at_ms)), kv('Updated', when(inst.updated_at_ms)),
      kv('Parent', inst.parent_instance && instLink(inst.parent_instance)),
      kv('Custom status', inst.custom_status !== undefined ? h('code', {}, JSON.stringify(inst.custom_status)) : null),
      kv('Start waits', backoff && `attempt ${backoff.attempt}, retry at ${when(backoff.retry_at_ms)}: ${backoff.reason}`))),
    h('div', { class: 'cols' },
      section('Input', h('pre', { 'data-test': 'input' }, json(inst.input))),
      inst.status === 'Completed' ? section('Output', h('pre', { 'data-test': 'output' }, json(inst.output))) : null,
      inst.status === 'Failed' ? section('Error', h('pre', { class: 'err', 'data-test': 'error' }, (inst.error.kind || '') + ': ' + (inst.error.message || ''))) : null),
    section('Actions', actionForms(inst)),
    section('Pending work', table(['Kind', 'What', 'Attempt', 'Visible / fires', 'Locked by', 'Session'], pending, { 'data-test': 'pending' })),
    section('Children', table(['Instance', 'Orchestration', 'Status'], (inst.child_rows || []).map((c) =>
      h('tr', {}, h('td', {}, instLink(c.instance_id)), h('td', {}, c.orchestration || ''), h('td', {}, c.status ? badge(c.status) : ''))), { 'data-test': 'children' })),
    section('History', execPicker, timeline(hist.events)));
};

views.sessions = async function (root) {
  const data = await api('sessions');
  const rows = data.sessions.map((s) => h('tr', { 'data-session': s.session_id },
    h('td', { class: 'mono' }, s.session_id), h('td', { class: 'mono' }, s.owner || ''),
    h('td', {}, h('span', { class: 'lease l-' + s.lease }, s.lease)),
    h('td', { class: 'num' }, s.lease === 'live' ? span(s.locked_until_ms - data.now_ms) : ''),
    h('td', { class: 'num' }, s.last_activity_ms ? span(s.idle_ms) : ''),
    h('td', { class: 'num' }, s.queued)));
  const moves = data.moves.map((m) => h('tr', { 'data-change': m.change },
    h('td', {}, when(m.t)), h('td', { class: 'mono' }, m.session_id), h('td', {}, m.change),
    h('td', { class: 'mono' }, m.from || ''), h('td', { class: 'mono' }, m.to || ''),
    h('td', {}, m.detail || '')));
  root.replaceChildren(h('h1', {}, 'Sessions'),
    table(['Session', 'Owner', 'Lease', 'Lease left', 'Idle', 'Work (queued or running)'], rows, { 'data-test': 'sessions' }),
    section('Claims, moves and releases', h('p', { class: 'muted' }, 'The sessions\' stored history, newest first: every claim, move (from a dead, lapsed or releasing owner) and release with its reason.'),
      table(['When', 'Session', 'Change', 'From', 'To', 'How / reason'], moves, { 'data-test': 'moves' })));
};

views.workers = async function (root) {
  const data = await api('workers');
  const rows = data.workers.map((w) => h('tr', { 'data-worker': w.worker_id },
    h('td', { class: 'mono' }, w.worker_id), h('td', { class: 'mono' }, w.host || ''),
    h('td', { class: 'num' }, w.pid || ''), h('td', {}, when(w.started_at_ms)),
    h('td', { class: 'num' }, w.running_turns), h('td', { class: 'num' }, w.running_activities),
    h('td', { class: 'mono' }, w.sessions.join(', ')), h('td', { class: 'num' }, w.session_queued),
    h('td', { class: 'num' }, w.lease_until_ms ? span(w.lease_until_ms - data.now_ms) : '')));
  root.replaceChildren(h('h1', {}, 'Workers'),
    h('p', { class: 'muted' }, 'Worker processes registered on the store and alive now (one killed with kill -9 leaves at once), their load (turns and activities in flight) and the sessions they own.'),
    table(['Worker', 'Host', 'PID', 'Started', 'Turns', 'Activities', 'Sessions', 'Session work', 'Lease left'], rows, { 'data-test': 'workers' }));
};

const SERIES = [
  ['orchestrator_queue', 'Orchestrator queue'], ['worker_queue', 'Worker queue'],
  ['instances', 'Instances'], ['sessions_owned', 'Sessions owned'],
  ['session_work', 'Session work'], ['workers', 'Live workers'],
];

function chart(samples, key, title) {
  const W = 360, H = 120, P = 4;
  const pts = samples.filter((s) => s[key] !== undefined);
  const max = Math.max(1, ...pts.map((s) => s[key]));
  const t0 = pts.length ? pts[0].t : 0, t1 = pts.length ? pts[pts.length - 1].t : 1;
  const x = (t) => P + ((W - 2 * P) * (t - t0)) / Math.max(1, t1 - t0);
  const y = (v) => H - P - ((H - 2 * P) * v) / max;
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('class', 'chart');
  const line = document.createElementNS(ns, 'polyline');
  line.setAttribute('points', pts.map((s) => `${x(s.t).toFixed(1)},${y(s[key]).toFixed(1)}`).join(' '));
  svg.append(line);
  const last = pts.length ? pts[pts.length - 1][key] : '';
  return h('figure', { class: 'chart-box', 'data-series': key },
    h('figcaption', {}, title, ' ', h('strong', {}, last), h('span', { class: 'muted' }, ' (max ' + max + ')')), svg);
}

views.metrics = async function (root) {
  const data = await api('metrics');
  const s = data.samples;
  const range = s.length > 1 ? span(s[s.length - 1].t - s[0].t) : 'no samples yet';
  root.replaceChildren(h('h1', {}, 'Metrics'),
    h('p', { class: 'muted' }, `Sampled every ${span(data.interval_ms)} by this console; showing ${range}.`),
    h('div', { class: 'charts', 'data-test': 'charts' }, SERIES.map(([k, t]) => chart(s, k, t))));
};

// {===== routing =====}

function route() {
  const parts = location.hash.replace(/^#\/?/, '').split('/');
  const name = views[parts[0]] ? parts[0] : 'instances';
  return { name, arg: parts.length > 1 ? decodeURIComponent(parts.slice(1).join('/')) : undefined };
}

// One render at a time; a render asked for meanwhile (a click during a refresh) runs right
// after, so the page always ends up showing the address's view.
let rendering = false, again = false;
async function render() {
  if (rendering) { again = true; return; }
  rendering = true;
  do {
    again = false;
    const r = route();
    const root = document.getElementById('view');
    for (const a of document.querySelectorAll('nav a'))
      a.classList.toggle('active', a.dataset.view === r.name || (r.name === 'instance' && a.dataset.view === 'instances'));
    try {
      await views[r.name](root, r.arg);
      root.dataset.view = r.name;
      root.dataset.renders = String(Number(root.dataset.renders || 0) + 1); // tests watch it
    } catch (e) {
      root.replaceChildren(h('h1', {}, 'Error'), h('p', { class: 'err', 'data-test': 'error' }, e.message));
    }
  } while (again);
  rendering = false;
}

function scheduleRefresh() {
  clearInterval(refreshTimer);
  refreshTimer = setInterval(() => {
    // Keep what the user is typing: no refresh while a form field has the focus.
    const typing = document.activeElement && ['INPUT', 'TEXTAREA', 'SELECT'].includes(document.activeElement.tagName);
    if (!typing) render();
  }, REFRESH_MS);
}

window.addEventListener('hashchange', render);
(async function main() {
  try {
    overview = await api('overview');
    document.getElementById('store').textContent = overview.store;
    document.getElementById('mode').classList.toggle('hidden', !overview.read_only);
  } catch (e) { flash(e.message, true); }
  render();
  scheduleRefresh();
}());
