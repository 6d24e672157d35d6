// app.js: the operator console. One page, hash routes, no framework: every view fetches the
// admin API with the session cookie plus the X-Seckill-Console header (the CSRF guard), and
// builds its DOM with textContent only, so no value from the API is ever parsed as HTML.
'use strict';

(() => {
  const REFRESH_MS = 3000;

  // ---------------------------------------------------------------- DOM helpers

  // h builds an element. attrs: class, text, testid (data-testid), on (event handlers), and
  // any other attribute or boolean property (hidden, disabled, required, checked, value).
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else if (k === 'testid') el.dataset.testid = v;
      else if (k === 'on') for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
      else if (k in el && typeof el[k] === 'boolean') el[k] = Boolean(v);
      else if (k === 'value') el.value = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }
  const byId = (id) => document.getElementById(id);
  const dash = '–';

  // fmtTime shows any RFC 3339 time in UTC, the zone the API and the logs use.
  function fmtTime(iso) {
    if (!iso) return dash;
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return String(iso);
    return d.toISOString().slice(0, 19).replace('T', ' ') + ' UTC';
  }
  const fmtNum = (n) => (n === undefined || n === null ? dash : Number(n).toLocaleString('en-US'));

  // localToUTC turns a datetime-local value (the operator's wall clock) into RFC 3339 UTC.
  function localToUTC(v) {
    if (!v) return '';
    const d = new Date(v);
    return Number.isNaN(d.getTime()) ? v : d.toISOString().replace(/\.\d{3}Z$/, 'Z');
  }
  function toLocalInput(d) {
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
  }

  // ---------------------------------------------------------------- API

  class APIError extends Error {
    constructor(status, body) {
      const b = body || {};
      super(b.message || b.error || `HTTP ${status}`);
      this.status = status;
      this.code = b.error || '';
      this.fields = Array.isArray(b.fields) ? b.fields : [];
    }
    // describe is what the page shows: the API's own words, with the status for context.
    describe() {
      if (this.status === 0) return this.message;
      return `${this.status}${this.code ? ' ' + this.code : ''}: ${this.message}`;
    }
  }

  // api calls the admin API. A 401 means the session ended: back to the sign-in form.
  async function api(method, path, body) {
    const init = {
      method,
      credentials: 'same-origin',
      headers: { 'X-Seckill-Console': '1', 'Content-Type': 'application/json' },
    };
    if (body !== undefined) init.body = JSON.stringify(body);
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (e) {
      throw new APIError(0, { message: `cannot reach the gateway (${e.message})` });
    }
    const text = await resp.text();
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch {
        data = { error: 'bad_response', message: text.slice(0, 300) };
      }
    }
    if (!resp.ok) {
      const err = new APIError(resp.status, data);
      // The console's own routes answer 401 for a wrong token at sign-in; elsewhere it means
      // the session ended (expired, signed out in another tab, admin token rotated).
      if (resp.status === 401 && !path.startsWith('/console/')) {
        err.sessionEnded = true;
        showSignIn('Your session ended or the admin token changed; sign in again.');
      }
      throw err;
    }
    return data;
  }

  // failed shows err in box (and each field error next to its input inside form); an ended
  // session has already sent the operator to the sign-in form.
  function failed(box, err, form) {
    if (!(err instanceof APIError)) throw err;
    if (err.sessionEnded) return;
    let unplaced = [];
    for (const f of err.fields) {
      const slot = form && form.querySelector(`[data-field-error="${CSS.escape(f.field)}"]`);
      if (slot) slot.textContent = f.message;
      else unplaced.push(`${f.field}: ${f.message}`);
    }
    box.textContent = err.fields.length && !unplaced.length ? err.describe() : [err.describe(), ...unplaced].join('\n');
    if (form) {
      const first = form.querySelector('.field-error:not(:empty)');
      const input = first && first.parentElement.querySelector('input, select, textarea');
      if (input) input.focus();
    }
  }
  function clearErrors(...roots) {
    for (const r of roots) {
      if (!r) continue;
      if (r.matches('.error, .notice, .field-error')) r.textContent = '';
      for (const el of r.querySelectorAll('.error, .notice, .field-error')) el.textContent = '';
    }
  }

  // busy disables a form's buttons while its request runs, so a double click sends one.
  async function busy(form, fn) {
    const buttons = [...form.querySelectorAll('button')];
    buttons.forEach((b) => { b.disabled = true; });
    try {
      return await fn();
    } finally {
      buttons.forEach((b) => { b.disabled = false; });
    }
  }

  // confirmAction asks in a modal <dialog> (keyboard reachable, no window.confirm). The
  // answer is read from the input itself (the form's submit names the button; Escape fires
  // cancel), both dispatched while the question is open. The dialog's close event would not
  // do: it is a queued task the browser runs after pending input, so the previous question's
  // close could arrive once this one is open and answer it.
  function confirmAction(text) {
    const dlg = byId('confirm');
    const form = dlg.querySelector('form');
    byId('confirm-text').textContent = text;
    return new Promise((resolve) => {
      const answer = (ok) => {
        form.removeEventListener('submit', onSubmit);
        dlg.removeEventListener('cancel', onEscape);
        resolve(ok);
      };
      const onSubmit = (ev) => answer(Boolean(ev.submitter) && ev.submitter.value === 'ok');
      const onEscape = () => answer(false);
      form.addEventListener('submit', onSubmit);
      dlg.addEventListener('cancel', onEscape);
      dlg.returnValue = '';
      dlg.showModal();
      byId('confirm-cancel').focus();
    });
  }

  // ---------------------------------------------------------------- sign-in and routing

  let current = { cleanup: null, gen: 0 };
  // The signed-in credential's role (GET /console/session): the page offers an action only
  // to a role that may take it. A courtesy, not a guard: the API checks every call.
  let role = '';
  const roleRank = { scrape: 1, viewer: 2, operator: 3, admin: 4 };
  const mayOperate = () => (roleRank[role] || 0) >= roleRank.operator;

  function showSignIn(message) {
    leaveView();
    byId('page').replaceChildren();
    byId('nav').hidden = true;
    byId('who').hidden = true;
    byId('sign-in').hidden = false;
    byId('sign-in-error').textContent = message || '';
    byId('sign-in-token').focus();
  }

  function signedIn(who) {
    role = who.role || '';
    byId('sign-in').hidden = true;
    byId('nav').hidden = false;
    byId('who').hidden = false;
    byId('signed-in-as').textContent = `signed in as ${who.name}`;
    route();
  }

  async function signIn(ev) {
    ev.preventDefault();
    const form = ev.target;
    const box = byId('sign-in-error');
    clearErrors(form);
    const token = byId('sign-in-token').value;
    await busy(form, async () => {
      try {
        // The session is in the name of the credential the token belongs to.
        await api('POST', '/console/login', { token });
        byId('sign-in-token').value = '';
        const who = await api('GET', '/console/session');
        // replaceState, not location.hash: no hashchange, so the view renders once.
        if (!location.hash || location.hash === '#/' || location.hash === '#') history.replaceState(null, '', '#/live');
        signedIn(who);
      } catch (e) {
        failed(box, e, form);
      }
    });
  }

  async function signOut() {
    try {
      await api('POST', '/console/logout');
    } finally {
      showSignIn('Signed out.');
    }
  }

  const routes = [
    [/^#\/live$/, renderLive],
    [/^#\/activities$/, renderActivities],
    [/^#\/activities\/(\d+)$/, renderActivity],
    [/^#\/exceptions(?:\?(.*))?$/, renderExceptions],
    [/^#\/exceptions\/(\d+)$/, renderException],
    [/^#\/reports$/, renderReports],
    [/^#\/sessions\/(\d+)\/prizes\/(\d+)$/, renderPrize],
  ];

  function leaveView() {
    if (current.cleanup) current.cleanup();
    current = { cleanup: null, gen: current.gen + 1 };
  }

  function route() {
    if (!byId('sign-in').hidden) return;
    const hash = location.hash || '#/live';
    leaveView();
    const page = byId('page');
    page.replaceChildren();
    for (const a of byId('nav').querySelectorAll('a')) {
      if (hash.startsWith('#/' + a.dataset.route)) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    for (const [re, view] of routes) {
      const m = hash.match(re);
      if (m) {
        const gen = current.gen;
        // stale() tells an async view that the operator moved on, so it renders nothing.
        current.cleanup = view(page, m, () => gen !== current.gen) || null;
        return;
      }
    }
    page.append(h('p', { class: 'error', text: `No view at ${hash}.` }), h('a', { href: '#/live', text: 'Go to Live' }));
  }

  // ---------------------------------------------------------------- shared pieces

  function table(headers, rows, attrs) {
    return h('div', { class: 'table-wrap' },
      h('table', attrs || {},
        h('thead', {}, h('tr', {}, headers.map((c) => h('th', { scope: 'col', text: c })))),
        h('tbody', {}, rows)));
  }

  // valueCell shows a scalar as text and anything nested as indented JSON.
  function valueCell(v) {
    if (v === null || v === undefined) return h('td', { text: dash });
    if (typeof v === 'object') return h('td', {}, h('pre', { text: JSON.stringify(v, null, 2) }));
    return h('td', { text: String(v) });
  }
  function kvTable(obj, testid) {
    if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) {
      return h('pre', { testid, text: JSON.stringify(obj, null, 2) });
    }
    const rows = Object.entries(obj).map(([k, v]) => h('tr', {}, h('th', { scope: 'row', text: k }), valueCell(v)));
    if (!rows.length) return h('p', { class: 'muted', testid, text: 'empty' });
    return h('div', { class: 'table-wrap' }, h('table', { testid }, h('tbody', {}, rows)));
  }
  function facts(pairs) {
    return h('dl', { class: 'facts' }, pairs.flatMap(([k, v]) => [h('dt', { text: k }), h('dd', {}, v)]));
  }
  const badge = (text) => h('span', { class: `badge ${text}`, text });
  // bucketsLink leads from a prize with stock buckets to its page (the bucket table); a
  // prize without buckets shows nothing more than it always did.
  const bucketsLink = (session, prize, n, testid) => (n > 1
    ? [' · ', h('a', { href: `#/sessions/${session}/prizes/${prize}`, testid, text: `${n} buckets` })]
    : null);
  // drawLink leads from a prize given by a draw to its page (the draw card).
  const drawLink = (session, prize, admission, testid) => (admission === 'draw'
    ? [' · ', h('a', { href: `#/sessions/${session}/prizes/${prize}`, testid, text: 'draw' })]
    : null);
  // prizeText is a prize as the activity lists show it: "sneaker × 500 (draw, 10s window)".
  const prizeText = (p) => `${p.name} × ${p.stock_per_session}` +
    (p.admission === 'draw' ? ` (draw, ${p.entry_window} window)` : '');
  const errorBox = (testid) => h('p', { class: 'error', testid, role: 'alert' });
  const noticeBox = (testid) => h('p', { class: 'notice', testid, role: 'status' });

  // poller runs load now and again REFRESH_MS after each run settles, while the tab is
  // visible: a hidden tab stops it (onHidden, if given, runs then) and showing it again
  // starts it. load renders what it fetched; a failure is shown in box, and a session that
  // ended stops the polling (the sign-in form is up). refresh runs it at once (after an
  // action); stop is the view's cleanup.
  function poller(load, box, stale, onHidden) {
    let timer = null;
    async function refresh() {
      clearTimeout(timer);
      timer = null;
      try {
        await load();
        if (stale()) return;
        box.textContent = '';
      } catch (e) {
        if (stale()) return;
        failed(box, e);
        if (e.sessionEnded) return;
      }
      if (!document.hidden) timer = setTimeout(refresh, REFRESH_MS);
    }
    function onVisibility() {
      if (document.hidden) {
        clearTimeout(timer);
        timer = null;
        if (onHidden) onHidden();
      } else if (timer === null) {
        refresh();
      }
    }
    document.addEventListener('visibilitychange', onVisibility);
    refresh();
    return {
      refresh,
      stop: () => {
        clearTimeout(timer);
        document.removeEventListener('visibilitychange', onVisibility);
      },
    };
  }

  // ---------------------------------------------------------------- Live

  // How many more of the day's other sessions each "Show more" lists.
  const OTHERS_PAGE = 20;

  // renderLive polls the overview every REFRESH_MS while the tab is visible. The session
  // cards (every open session and each activity's next one) are rebuilt only when the set
  // of sessions, their states or prizes changes, so an adjust-stock form being filled in
  // survives the refreshes; the figures update in place. The day's other sessions are a
  // count and a one-line-each list that "Show more" extends a page at a time.
  function renderLive(page, _m, stale) {
    const updated = h('span', { class: 'muted', testid: 'live-updated', text: 'loading…' });
    const error = errorBox('live-error');
    // What a Preheat or Close did, above the cards: a card is rebuilt when its session's
    // state changes, which is exactly what a Close does.
    const actionError = errorBox('live-action-error');
    const actionNote = noticeBox('live-notice');
    const totals = h('div', { class: 'totals' });
    const sessions = h('div', { testid: 'live-sessions' });
    const othersTitle = h('h2', { testid: 'others-title', text: 'Other sessions today' });
    const othersList = h('div', { testid: 'others-list' });
    const othersMore = h('button', { type: 'button', testid: 'others-more', text: 'Show more',
      on: { click: () => { othersLimit += OTHERS_PAGE; poll.refresh(); } } });
    const others = h('section', { class: 'card', testid: 'live-others', hidden: true }, othersTitle, othersList, othersMore);
    page.append(h('div', { class: 'row spread' }, h('h1', { text: 'Live' }), updated), error, actionError, actionNote, totals, sessions, others);
    let othersLimit = 0;

    let signature = null;
    let cells = new Map(); // "sid:pid" -> {field: element}
    let prev = new Map(); // "sid:pid" -> {admitted, at}: the last refresh, for admissions/s

    const stat = (label, testid) => {
      const value = h('div', { class: 'value num', testid, text: dash });
      totals.append(h('div', { class: 'stat' }, h('div', { class: 'label', text: label }), value));
      return value;
    };
    const backlog = stat('Compensation backlog', 'compensation-backlog');
    const lag = stat('Consumer lag', 'consumer-lag');
    const exceptions = h('div', { class: 'value', testid: 'open-exceptions', text: dash });
    totals.append(h('div', { class: 'stat' }, h('div', { class: 'label', text: 'Open exceptions' }), exceptions));

    function build(data) {
      cells = new Map();
      const cards = (data.sessions || []).map((s) => sessionCard(s));
      sessions.replaceChildren(...(cards.length ? cards : [h('p', { class: 'muted card', text: 'No sessions running or coming up.' })]));
    }

    function sessionCard(s) {
      const buttons = [];
      if (s.state === 'upcoming') {
        buttons.push(h('button', { type: 'button', id: `preheat-${s.session_id}`, testid: `preheat-${s.session_id}`, text: 'Preheat',
          on: { click: (ev) => sessionAction(ev.target, s, 'preheat') } }));
      }
      if (s.state === 'upcoming' || s.state === 'open') {
        buttons.push(h('button', { type: 'button', class: 'danger', id: `close-${s.session_id}`, testid: `close-${s.session_id}`, text: 'Close',
          on: { click: (ev) => sessionAction(ev.target, s, 'close') } }));
      }
      return h('section', { class: 'card', testid: `session-${s.session_id}`, 'aria-labelledby': `session-${s.session_id}-title` },
        h('div', { class: 'row spread' },
          h('h2', { id: `session-${s.session_id}-title` },
            `Session ${s.session_id} · `, h('a', { href: `#/activities/${s.activity_id}`, text: s.activity_name || `activity ${s.activity_id}` }), ' ',
            badge(s.state)),
          h('span', { class: 'muted', text: `${fmtTime(s.starts_at)} → ${fmtTime(s.ends_at)}` })),
        buttons.length ? h('div', { class: 'actions' }, buttons) : null,
        (s.prizes || []).map((p) => prizeBlock(s, p)));
    }

    function prizeBlock(s, p) {
      const key = `${s.session_id}-${p.prize_id}`;
      const fig = {};
      const figure = (label, field) => {
        fig[field] = h('dd', { class: 'num', testid: `prize-${key}-${field}`, text: dash });
        return h('div', {}, h('dt', { text: label }), fig[field]);
      };
      cells.set(key, fig);
      return h('div', { class: 'prize', testid: `prize-${key}` },
        h('h3', {}, `${p.name} (prize ${p.prize_id})`, bucketsLink(s.session_id, p.prize_id, p.buckets, `prize-${key}-buckets`)),
        h('dl', { class: 'figures' },
          figure('MySQL left', 'mysql-left'), figure('Redis left', 'redis-left'), figure('Sold', 'sold'),
          figure('Pending', 'pending'), figure('Admissions/s', 'rate'), figure('Lag', 'lag'), figure('Total', 'total')),
        s.state === 'upcoming' ? adjustForm(s, p) : null);
    }

    function fillOthers(o) {
      const total = (o && o.total) || 0;
      const listed = (o && o.sessions) || [];
      others.hidden = total === 0;
      othersTitle.textContent = `Other sessions today (${total})`;
      othersList.replaceChildren(...(listed.length
        ? [table(['Session', 'Activity', 'Time', 'State'], listed.map((s) => h('tr', { testid: `other-${s.session_id}` },
          h('td', { class: 'num', text: String(s.session_id) }),
          h('td', {}, h('a', { href: `#/activities/${s.activity_id}`, text: s.activity_name || `activity ${s.activity_id}` })),
          h('td', { text: `${fmtTime(s.starts_at)} → ${fmtTime(s.ends_at)}` }),
          h('td', {}, badge(s.state)))))]
        : []));
      othersMore.hidden = listed.length >= total;
      othersMore.textContent = listed.length ? 'Show more' : `Show them (${Math.min(OTHERS_PAGE, total)} at a time)`;
    }

    function fill(data) {
      fillOthers(data.others);
      backlog.textContent = fmtNum(data.compensation_backlog);
      lag.textContent = fmtNum(data.consumer_lag);
      const kinds = Object.entries(data.open_exceptions || {}).filter(([, n]) => n > 0);
      exceptions.replaceChildren(...(kinds.length
        ? kinds.map(([k, n]) => h('div', {}, h('a', { href: `#/exceptions?state=open&kind=${encodeURIComponent(k)}`, text: `${k}: ${n}` })))
        : [document.createTextNode('0')]));
      const now = performance.now();
      const seen = new Map();
      for (const s of data.sessions || []) {
        for (const p of s.prizes || []) {
          const key = `${s.session_id}-${p.prize_id}`;
          const c = cells.get(key);
          if (!c) continue;
          const r = p.redis || {};
          c['mysql-left'].textContent = fmtNum(p.mysql_left);
          c['redis-left'].textContent = r.loaded ? fmtNum(r.left) : 'not loaded';
          c['redis-left'].classList.toggle('word', !r.loaded);
          c.sold.textContent = fmtNum(p.sold);
          c.pending.textContent = r.loaded ? fmtNum(r.pending) : dash;
          c.lag.textContent = fmtNum(p.lag);
          c.total.textContent = fmtNum(p.total);
          const before = prev.get(key);
          const secs = before ? (now - before.at) / 1000 : 0;
          c.rate.textContent = before && secs > 0 ? (Math.max(0, p.admitted - before.admitted) / secs).toFixed(1) : dash;
          seen.set(key, { admitted: p.admitted, at: now });
        }
      }
      prev = seen;
      updated.textContent = `updated ${fmtTime(data.generated_at)}`;
    }

    async function load() {
      const data = await api('GET', othersLimit ? `/admin/v1/overview?others_limit=${othersLimit}` : '/admin/v1/overview');
      if (stale()) return;
      const sig = (data.sessions || []).map((s) => `${s.session_id}:${s.state}:${(s.prizes || []).map((p) => p.prize_id).join(',')}`).join('|');
      if (sig !== signature) {
        build(data);
        signature = sig;
      }
      fill(data);
    }

    async function sessionAction(button, s, what) {
      clearErrors(actionError, actionNote);
      if (what === 'close' && !(await confirmAction(`Close session ${s.session_id} (${s.activity_name}) now? Grabs are refused from then on.`))) return;
      button.disabled = true;
      try {
        const out = await api('POST', `/admin/v1/sessions/${s.session_id}/${what}`);
        // Preheat answers the prize ids it loaded and the ones already in Redis.
        const count = (ids) => (Array.isArray(ids) ? ids.length : 0);
        actionNote.textContent = what === 'preheat'
          ? `Session ${s.session_id} preheated: ${count(out && out.loaded)} loaded, ${count(out && out.kept)} already in Redis.`
          : `Session ${s.session_id} closed.`;
        poll.refresh();
      } catch (e) {
        failed(actionError, e);
      } finally {
        button.disabled = false;
      }
    }

    function adjustForm(s, p) {
      const id = `adjust-${s.session_id}-${p.prize_id}`;
      const err = errorBox(`${id}-error`);
      const note = noticeBox(`${id}-notice`);
      const form = h('form', { id, testid: id, novalidate: true },
        h('div', { class: 'inline' },
          h('div', {},
            h('label', { for: `${id}-total`, text: 'New total' }),
            h('input', { id: `${id}-total`, type: 'number', min: '0', inputmode: 'numeric', value: String(p.total) }),
            h('p', { class: 'field-error', 'data-field-error': 'total' })),
          h('div', {},
            h('label', { for: `${id}-reason`, text: 'Reason (audit log)' }),
            h('input', { id: `${id}-reason`, type: 'text', maxlength: '512' }),
            h('p', { class: 'field-error', 'data-field-error': 'reason' })),
          h('button', { type: 'submit', text: 'Adjust stock' })),
        err, note);
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        clearErrors(form);
        const raw = byId(`${id}-total`).value;
        const body = { total: raw === '' ? null : Number(raw), reason: byId(`${id}-reason`).value };
        await busy(form, async () => {
          try {
            const out = await api('PUT', `/admin/v1/sessions/${s.session_id}/prizes/${p.prize_id}/stock`, body);
            note.textContent = `Total ${out.before} → ${out.after}${out.redis_updated ? ' (Redis updated too)' : ''}.`;
            byId(`${id}-reason`).value = '';
          } catch (e) {
            failed(err, e, form);
          }
        });
      });
      return h('details', {}, h('summary', { text: 'Adjust stock' }), form);
    }

    // The first refresh after a hidden tab comes back shows no rate (a rate averaged over
    // the hidden minutes would mislead).
    const poll = poller(load, error, stale, () => { prev = new Map(); });
    return poll.stop;
  }

  // ---------------------------------------------------------------- Activities

  function renderActivities(page, _m, stale) {
    const error = errorBox('activities-error');
    const list = h('div', { testid: 'activities-list', text: 'loading…' });
    page.append(h('h1', { text: 'Activities' }), error, h('section', { class: 'card' }, list), activityForm());
    api('GET', '/admin/v1/activities').then((data) => {
      if (stale()) return;
      const acts = (data && data.activities) || [];
      if (!acts.length) {
        list.replaceChildren(h('p', { class: 'muted', text: 'No activities yet.' }));
        return;
      }
      list.replaceChildren(table(['Id', 'Name', 'Window', 'Every / length', 'Limit', 'Status', 'Prizes'],
        acts.map((a) => h('tr', { testid: `activity-${a.id}` },
          h('td', {}, h('a', { href: `#/activities/${a.id}`, text: String(a.id) })),
          h('td', {}, h('a', { href: `#/activities/${a.id}`, text: a.name })),
          h('td', { text: `${fmtTime(a.window_start)} → ${fmtTime(a.window_end)}` }),
          h('td', { text: `${a.interval} / ${a.session_length}` }),
          h('td', { class: 'num', text: String(a.per_user_limit) }),
          h('td', {}, badge(a.status || dash)),
          h('td', { text: (a.prizes || []).map(prizeText).join(', ') })))));
    }).catch((e) => {
      if (stale()) return;
      list.textContent = '';
      failed(error, e);
    });
  }

  // activityForm creates an activity. It is novalidate on purpose: the API is the one
  // validator, and its field messages appear next to each input.
  function activityForm() {
    const start = new Date();
    start.setMinutes(0, 0, 0);
    start.setHours(start.getHours() + 1);
    const end = new Date(start.getTime() + 2 * 3600e3);
    const err = errorBox('activity-form-error');
    const field = (name, label, input, hint) => h('div', {},
      h('label', { for: `act-${name}`, text: label }), input,
      hint ? h('small', { class: 'muted', text: hint }) : null,
      h('p', { class: 'field-error', 'data-field-error': name, testid: `field-error-${name}` }));
    const prizes = h('div', { testid: 'prize-rows' });
    let prizeSeq = 0;
    const addPrize = (name, stock) => {
      const i = prizeSeq++;
      const row = h('div', { class: 'inline prize-row' },
        h('div', {},
          h('label', { for: `act-prize-name-${i}`, text: 'Prize' }),
          h('input', { id: `act-prize-name-${i}`, class: 'prize-name', type: 'text', value: name || '' }),
          h('p', { class: 'field-error prize-name-error' })),
        h('div', {},
          h('label', { for: `act-prize-stock-${i}`, text: 'Stock per session' }),
          h('input', { id: `act-prize-stock-${i}`, class: 'prize-stock', type: 'number', min: '0', inputmode: 'numeric', value: stock === undefined ? '' : String(stock) }),
          h('p', { class: 'field-error prize-stock-error' })),
        h('div', {},
          h('label', { for: `act-prize-admission-${i}`, text: 'Admission' }),
          h('select', { id: `act-prize-admission-${i}`, class: 'prize-admission' },
            h('option', { value: 'fcfs', text: 'first come, first served' }),
            h('option', { value: 'draw', text: 'draw' })),
          h('p', { class: 'field-error prize-admission-error' })),
        h('div', {},
          h('label', { for: `act-prize-entry-window-${i}`, text: 'Entry window' }),
          h('input', { id: `act-prize-entry-window-${i}`, class: 'prize-entry-window', type: 'text', placeholder: '10s' }),
          h('small', { class: 'muted', text: 'Go duration; draw only' }),
          h('p', { class: 'field-error prize-entry-window-error' })),
        h('button', { type: 'button', class: 'secondary', text: 'Remove', 'aria-label': `Remove prize row ${i + 1}`,
          on: { click: () => { row.remove(); renumber(); } } }));
      prizes.append(row);
      renumber();
    };
    // The API names prize fields by position (prizes[1].stock): keep the error slots in step
    // with the rows as they are now.
    const renumber = () => {
      [...prizes.children].forEach((row, i) => {
        row.querySelector('.prize-name-error').dataset.fieldError = `prizes[${i}].name`;
        row.querySelector('.prize-stock-error').dataset.fieldError = `prizes[${i}].stock`;
        row.querySelector('.prize-admission-error').dataset.fieldError = `prizes[${i}].admission`;
        row.querySelector('.prize-entry-window-error').dataset.fieldError = `prizes[${i}].entry_window`;
      });
    };
    addPrize('phone', 100);

    const form = h('form', { id: 'activity-form', testid: 'activity-form', novalidate: true },
      h('h2', { text: 'New activity' }),
      h('div', { class: 'grid' },
        field('name', 'Name', h('input', { id: 'act-name', type: 'text', maxlength: '128' })),
        field('window_start', 'Window start', h('input', { id: 'act-window_start', type: 'datetime-local', value: toLocalInput(start) }), 'your local time; sent as UTC'),
        field('window_end', 'Window end', h('input', { id: 'act-window_end', type: 'datetime-local', value: toLocalInput(end) }), 'your local time; sent as UTC'),
        field('interval', 'A session every', h('input', { id: 'act-interval', type: 'text', value: '30m' }), 'Go duration: 30m, 1h'),
        field('session_length', 'Session length', h('input', { id: 'act-session_length', type: 'text', value: '10m' })),
        field('per_user_limit', 'Per-user limit', h('input', { id: 'act-per_user_limit', type: 'number', min: '1', value: '1' })),
        field('payment_timeout', 'Payment timeout', h('input', { id: 'act-payment_timeout', type: 'text', placeholder: 'none' }), 'e.g. 15m; empty: none')),
      h('label', { class: 'check' }, h('input', { id: 'act-regrab_after_cancel', type: 'checkbox' }), 'A buyer may grab again after a cancellation'),
      h('h3', { text: 'Prizes' }),
      h('p', { class: 'field-error', 'data-field-error': 'prizes' }),
      prizes,
      h('div', { class: 'actions' },
        h('button', { type: 'button', class: 'secondary', id: 'add-prize', text: 'Add prize', on: { click: () => addPrize() } }),
        h('button', { type: 'submit', id: 'create-activity', text: 'Create activity' })),
      err);

    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      clearErrors(form);
      const val = (id) => byId(id).value;
      const limit = val('act-per_user_limit');
      const body = {
        name: val('act-name'),
        window_start: localToUTC(val('act-window_start')),
        window_end: localToUTC(val('act-window_end')),
        interval: val('act-interval'),
        session_length: val('act-session_length'),
        per_user_limit: limit === '' ? null : Number(limit),
        payment_timeout: val('act-payment_timeout'),
        regrab_after_cancel: byId('act-regrab_after_cancel').checked,
        prizes: [...prizes.children].map((row) => {
          const stock = row.querySelector('.prize-stock').value;
          const prize = { name: row.querySelector('.prize-name').value, stock: stock === '' ? null : Number(stock) };
          // A first-come prize is sent as before (no admission, no window); a draw with its
          // window as typed, for the API to judge.
          if (row.querySelector('.prize-admission').value === 'draw') {
            prize.admission = 'draw';
            prize.entry_window = row.querySelector('.prize-entry-window').value;
          }
          return prize;
        }),
      };
      await busy(form, async () => {
        try {
          const created = await api('POST', '/admin/v1/activities', body);
          location.hash = `#/activities/${created.id}`;
        } catch (e) {
          failed(err, e, form);
        }
      });
    });
    return h('section', { class: 'card' }, form);
  }

  function renderActivity(page, m, stale) {
    const id = m[1];
    const error = errorBox('activity-error');
    const body = h('div', { text: 'loading…' });
    page.append(h('p', {}, h('a', { href: '#/activities', text: '← Activities' })), error, body);
    api('GET', `/admin/v1/activities/${id}`).then((a) => {
      if (stale()) return;
      const names = new Map((a.prizes || []).map((p) => [p.id, p.name]));
      const admissions = new Map((a.prizes || []).map((p) => [p.id, p.admission]));
      const sessions = a.sessions || [];
      body.replaceChildren(
        h('section', { class: 'card' },
          h('h1', { testid: 'activity-name' }, `${a.name} `, badge(a.status || dash)),
          facts([
            ['Id', String(a.id)],
            ['Window', `${fmtTime(a.window_start)} → ${fmtTime(a.window_end)}`],
            ['A session every', a.interval],
            ['Session length', a.session_length],
            ['Per-user limit', String(a.per_user_limit)],
            ['Payment timeout', a.payment_timeout === '0s' ? 'none' : a.payment_timeout],
            ['Regrab after cancel', a.regrab_after_cancel ? 'yes' : 'no'],
            ['Prizes', h('span', { testid: 'activity-prizes', text: (a.prizes || []).map(prizeText).join(', ') })],
          ])),
        h('section', { class: 'card' },
          h('h2', { text: `Sessions (${sessions.length})` }),
          table(['Session', 'Seq', 'Start', 'End', 'Closed', 'Stock: MySQL left / total · Redis'],
            sessions.map((s) => h('tr', { testid: `session-row-${s.id}` },
              h('td', { class: 'num', text: String(s.id) }),
              h('td', { class: 'num', text: String(s.seq) }),
              h('td', { text: fmtTime(s.start) }),
              h('td', { text: fmtTime(s.end) }),
              h('td', { text: s.closed_at ? fmtTime(s.closed_at) : dash }),
              h('td', {}, (s.stock || []).map((st) => h('div', {},
                `${names.get(st.prize_id) || 'prize ' + st.prize_id}: ${fmtNum(st.db.left)} / ${fmtNum(st.db.total)} · ` +
                  (st.redis && st.redis.loaded ? `Redis ${fmtNum(st.redis.left)} left, ${fmtNum(st.redis.pending)} pending` : 'not in Redis'),
                bucketsLink(s.id, st.prize_id, st.buckets, `stock-${s.id}-${st.prize_id}-buckets`),
                drawLink(s.id, st.prize_id, admissions.get(st.prize_id), `stock-${s.id}-${st.prize_id}-draw`)))))),
            { testid: 'sessions-table' })));
    }).catch((e) => {
      if (stale()) return;
      body.textContent = '';
      failed(error, e);
    });
  }

  // ---------------------------------------------------------------- A prize and its buckets

  // renderPrize shows one session×prize: its stock summed over its stock buckets and, with
  // more than one, each bucket side by side in MySQL and Redis (with what the transfers
  // between buckets sent and received, the gateways' demand and wanted signals) and the
  // transfers not finished yet. It refreshes every REFRESH_MS while the tab is visible. A
  // prize without buckets gets no table: its one row would repeat the figures above.
  function renderPrize(page, m, stale) {
    const [sid, pid] = [m[1], m[2]];
    const error = errorBox('prize-error');
    const updated = h('span', { class: 'muted', testid: 'prize-updated', text: 'loading…' });
    const body = h('div', {});
    const draw = drawCard(sid, pid, () => poll.refresh());
    page.append(h('p', {}, h('a', { href: '#/live', text: '← Live' })), error, body, draw.card);

    // A stock adjustment moves units from or to outside the prize (bucket -1 in the journal).
    const end = (b) => (b < 0 ? 'outside' : String(b));
    const redisText = (r) => (r && r.loaded ? `${fmtNum(r.left)} / ${fmtNum(r.total)}` : 'not loaded');
    function view(v) {
      const head = h('section', { class: 'card' },
        h('div', { class: 'row spread' },
          h('h1', { testid: 'prize-title' }, `${v.name || 'prize'} (prize ${v.prize_id}) `, badge(v.state)), updated),
        facts([
          ['Session', h('span', {}, `${v.session_id} · `, h('a', { href: `#/activities/${v.activity_id}`, text: v.activity_name || `activity ${v.activity_id}` }))],
          ['Stock buckets', h('span', { testid: 'prize-buckets', text: String(v.buckets) })],
          ['MySQL left / total', h('span', { class: 'num', testid: 'prize-mysql', text: `${fmtNum(v.db.left)} / ${fmtNum(v.db.total)}` })],
          ['Redis left / total', h('span', { class: 'num', testid: 'prize-redis', text: redisText(v.redis) })],
          ['Pending', h('span', { class: 'num', testid: 'prize-pending', text: fmtNum(v.redis && v.redis.pending) })],
          ['In flight', h('span', { class: 'num', testid: 'prize-in-flight', text: fmtNum(v.in_flight) })],
        ]));
      if (v.buckets <= 1) {
        return [head, h('p', { class: 'muted card', testid: 'no-buckets',
          text: 'One stock bucket: the figures above are the prize\'s own row and Redis keys.' })];
      }
      const rows = (v.bucket_rows || []).map((b) => {
        const r = b.redis || {};
        const cell = (field, text) => h('td', { class: 'num', testid: `bucket-${b.bucket}-${field}`, text });
        return h('tr', { testid: `bucket-row-${b.bucket}` },
          cell('bucket', String(b.bucket)),
          cell('mysql', `${fmtNum(b.db.left)} / ${fmtNum(b.db.total)}`),
          cell('version', fmtNum(b.db.version)),
          cell('redis', redisText(r)),
          cell('sent', r.loaded ? fmtNum(r.sent) : dash),
          cell('received', r.loaded ? fmtNum(r.received) : dash),
          cell('pending', fmtNum(r.pending)),
          cell('demand', fmtNum(r.demand)),
          h('td', { testid: `bucket-${b.bucket}-wanted` }, r.wanted ? badge('wanted') : dash));
      });
      const transfers = v.transfers || [];
      return [head,
        h('section', { class: 'card' },
          h('h2', { text: 'Buckets' }),
          h('p', { class: 'muted', text: 'Demand: grabs the gateways counted since the rebalance loop last read it. ' +
            'Wanted: a gateway found the bucket dry while units remained elsewhere.' }),
          table(['Bucket', 'MySQL left / total', 'Version', 'Redis left / total', 'Sent', 'Received', 'Pending', 'Demand', 'Wanted'],
            rows, { testid: 'buckets-table' })),
        h('section', { class: 'card' },
          h('h2', { text: `Unfinished transfers (${transfers.length})` }),
          transfers.length
            ? table(['Transfer', 'From → to', 'Requested', 'Taken', 'Moved', 'State', 'Fence'],
              transfers.map((x) => h('tr', { testid: `transfer-${x.id}` },
                h('td', { class: 'num', text: String(x.id) }),
                h('td', { text: `${end(x.from)} → ${end(x.to)}` }),
                h('td', { class: 'num', text: fmtNum(x.requested) }),
                h('td', { class: 'num', text: x.state === 'planned' ? dash : fmtNum(x.taken) }),
                h('td', { class: 'num', text: x.state === 'planned' ? dash : fmtNum(x.units) }),
                h('td', {}, badge(x.state)),
                h('td', { class: 'num', text: fmtNum(x.fence) }))), { testid: 'transfers-table' })
            : h('p', { class: 'muted', testid: 'no-transfers', text: 'None: no units are moving between buckets.' }))];
    }

    const poll = poller(async () => {
      // A prize given by a draw has a draw panel; any other prize's is a 404.
      const [v, panel] = await Promise.all([
        api('GET', `/admin/v1/sessions/${sid}/prizes/${pid}`),
        api('GET', `/admin/v1/sessions/${sid}/prizes/${pid}/draw`).catch((e) => {
          if (e instanceof APIError && e.status === 404) return null;
          throw e;
        }),
      ]);
      if (stale()) return;
      updated.textContent = `updated ${fmtTime(new Date().toISOString())}`;
      body.replaceChildren(...view(v));
      draw.fill(panel);
    }, error, stale);
    return poll.stop;
  }

  // drawCard is the prize page's Draw card: the draw's public record (phase, commitment,
  // beacon, entries, root, seed, cutoff, skipped places; the ranking values only counted),
  // the entrants by state, the entries refused before the window and the first places. fill
  // redraws it on each refresh (null: the prize has no draw, the card stays hidden). The
  // beacon form, offered to operators while the named round's signature is missing, is built
  // once and only shown or hidden, so a signature being pasted survives the refreshes.
  function drawCard(sid, pid, refresh) {
    const head = h('h2', { testid: 'draw-title' }, 'Draw');
    const factsBox = h('div', {});
    const winners = h('div', {});
    const err = errorBox('beacon-error');
    const note = noticeBox('beacon-notice');
    const round = h('span', {});
    const form = h('form', { id: 'beacon-form', testid: 'beacon-form', novalidate: true },
      h('h3', {}, 'Beacon signature of round ', round),
      h('p', { class: 'muted', text: 'The draw waits for it: fetch the round\'s signature from the beacon network ' +
        '(drand: GET /<chain hash>/public/<round>) once the entry window has closed, and paste it here.' }),
      h('label', { for: 'beacon-signature', text: 'Signature (hex)' }),
      h('input', { id: 'beacon-signature', type: 'text', autocomplete: 'off', spellcheck: 'false' }),
      h('p', { class: 'field-error', 'data-field-error': 'signature', testid: 'field-error-signature' }),
      h('button', { type: 'submit', id: 'beacon-submit', text: 'Store the signature' }),
      err);
    form.hidden = true;
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      clearErrors(form, note);
      await busy(form, async () => {
        try {
          const out = await api('PUT', `/admin/v1/sessions/${sid}/prizes/${pid}/draw/beacon`, { signature: byId('beacon-signature').value.trim() });
          byId('beacon-signature').value = '';
          note.textContent = `Signature of round ${out.round} stored; the reconciler's next run draws.`;
          refresh();
        } catch (e) {
          failed(err, e, form);
        }
      });
    });
    const card = h('section', { class: 'card', testid: 'draw-card', hidden: true }, head, factsBox, form, note, winners);

    const hash = (v, testid) => (v ? h('code', { class: 'hash', testid, text: v }) : h('span', { class: 'muted', testid, text: dash }));
    function fill(panel) {
      card.hidden = !panel;
      if (!panel) return;
      const r = panel.record || {};
      const b = r.beacon;
      const frozen = r.phase !== 'committed';
      head.replaceChildren('Draw ', h('span', { testid: 'draw-phase' }, badge(r.phase || dash)));
      const entrants = Object.entries(panel.entrants || {}).filter(([, n]) => n > 0);
      const skipped = r.skipped_places || [];
      factsBox.replaceChildren(facts([
        ['Commitment', hash(r.commitment, 'draw-commitment')],
        ['Entry window ends', h('span', { testid: 'draw-window-end', text: fmtTime(r.entry_window_end) })],
        ['Beacon', h('span', { testid: 'draw-beacon', text: b && b.round
          ? `${b.scheme || 'drand'} round ${b.round} · ${b.signature ? 'signature in' : 'awaiting its signature'}`
          : 'none (the seed alone)' })],
        ['Entries', h('span', { class: 'num', testid: 'draw-entries', text: frozen ? fmtNum(r.entries) : 'counted at the freeze' })],
        ['Merkle root', hash(r.merkle_root, 'draw-root')],
        ['Seed', r.seed ? hash(r.seed, 'draw-seed') : h('span', { class: 'muted', testid: 'draw-seed', text: 'revealed once drawn' })],
        ['Ranking values', h('span', { testid: 'draw-values', text: r.ranking_values ? `${fmtNum(r.ranking_values.length)} (in the public record)` : dash })],
        ['Cutoff', h('span', { class: 'num', testid: 'draw-cutoff', text: `${fmtNum(r.cutoff)} ${r.cutoff === 1 ? 'place' : 'places'} offered a unit` })],
        ['Skipped places', h('span', { testid: 'draw-skipped', text: skipped.length ? skipped.join(', ') : 'none' })],
        ['Entrants by state', h('span', { testid: 'draw-entrants', text: entrants.length ? entrants.map(([k, n]) => `${k} ${fmtNum(n)}`).join(' · ') : 'none yet' })],
        ['Refused before the window', h('span', { class: 'num', testid: 'draw-early', text: fmtNum(panel.early_refused) })],
      ]));
      round.textContent = b && b.round ? String(b.round) : '';
      form.hidden = !(b && b.round && !b.signature && mayOperate());
      const top = panel.winners || [];
      winners.replaceChildren(h('h3', { text: `First places (${top.length}${r.cutoff > top.length ? ` of ${fmtNum(r.cutoff)}` : ''})` }),
        top.length
          ? table(['Place', 'User', 'State'], top.map((w) => h('tr', { testid: `draw-place-${w.place}` },
            h('td', { class: 'num', text: String(w.place) }),
            h('td', { text: w.user_id }),
            h('td', {}, badge(w.state)))), { testid: 'draw-winners' })
          : h('p', { class: 'muted', testid: 'draw-winners', text: 'No place offered a unit yet.' }));
    }
    return { card, fill };
  }

  // ---------------------------------------------------------------- Exceptions

  const caseStates = [['open', 'open'], ['replayed', 'replayed'], ['resolved', 'resolved'], ['dismissed', 'dismissed'], ['', 'all']];
  // The kinds of pkg/seckill (Case*), offered as suggestions; any other kind can be typed.
  const knownKinds = ['dead_letter', 'admitted_rejected', 'drift_uncorrected', 'stale_reservation', 'compensation_failing',
    'replay_gap', 'unknown_order', 'feedback_for_rejected', 'cancel_after_paid', 'paid_after_cancel'];

  function renderExceptions(page, m, stale) {
    const q = new URLSearchParams(m[1] || 'state=open');
    const error = errorBox('exceptions-error');
    const list = h('div', { testid: 'exceptions-list', text: 'loading…' });
    const form = h('form', { id: 'exception-filters', class: 'inline' },
      h('div', {},
        h('label', { for: 'filter-state', text: 'State' }),
        h('select', { id: 'filter-state' }, caseStates.map(([v, label]) => h('option', { value: v, text: label, selected: (q.get('state') || '') === v })))),
      h('div', {},
        h('label', { for: 'filter-kind', text: 'Kind' }),
        h('input', { id: 'filter-kind', type: 'text', list: 'known-kinds', value: q.get('kind') || '', placeholder: 'any' }),
        h('datalist', { id: 'known-kinds' }, knownKinds.map((k) => h('option', { value: k })))),
      h('div', {},
        h('label', { for: 'filter-session', text: 'Session id' }),
        h('input', { id: 'filter-session', type: 'number', min: '1', inputmode: 'numeric', value: q.get('session_id') || '', placeholder: 'any' })),
      h('button', { type: 'submit', id: 'filter-apply', text: 'Show' }));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const next = new URLSearchParams({ state: byId('filter-state').value });
      if (byId('filter-kind').value.trim()) next.set('kind', byId('filter-kind').value.trim());
      if (byId('filter-session').value) next.set('session_id', byId('filter-session').value);
      const hash = `#/exceptions?${next}`;
      if (location.hash === hash) route();
      else location.hash = hash;
    });
    page.append(h('h1', { text: 'Exceptions' }), h('section', { class: 'card' }, form), error, h('section', { class: 'card' }, list));

    // Only the filters that are set: the API refuses a filter given empty (?kind=).
    const params = new URLSearchParams({ limit: '100' });
    for (const name of ['state', 'kind', 'session_id']) {
      if (q.get(name)) params.set(name, q.get(name));
    }
    api('GET', `/admin/v1/exceptions?${params}`).then((data) => {
      if (stale()) return;
      const cases = (data && data.cases) || [];
      if (!cases.length) {
        list.replaceChildren(h('p', { class: 'muted', testid: 'no-exceptions', text: 'No cases match.' }));
        return;
      }
      list.replaceChildren(table(['Case', 'Kind', 'State', 'Session / prize', 'User', 'Seen', 'Last seen', 'Detail'],
        cases.map((c) => h('tr', { testid: `case-${c.id}` },
          h('td', {}, h('a', { href: `#/exceptions/${c.id}`, testid: `case-link-${c.id}`, text: `#${c.id}` })),
          h('td', {}, badge(c.kind)),
          h('td', {}, badge(c.state)),
          h('td', { text: `${c.session_id || dash} / ${c.prize_id || dash}` }),
          h('td', { text: c.user_id || dash }),
          h('td', { class: 'num', text: fmtNum(c.seen) }),
          h('td', { text: fmtTime(c.last_seen) }),
          h('td', { text: c.detail || '' }))),
        { testid: 'exceptions-table' }));
    }).catch((e) => {
      if (stale()) return;
      list.textContent = '';
      failed(error, e);
    });
  }

  function renderException(page, m, stale) {
    const id = m[1];
    const error = errorBox('case-error');
    const body = h('div', { text: 'loading…' });
    page.append(h('p', {}, h('a', { href: '#/exceptions', text: '← Exceptions' })), error, body);
    const load = (notice) => api('GET', `/admin/v1/exceptions/${id}`).then((c) => {
      if (stale()) return;
      body.replaceChildren(caseView(c, load, notice));
    }).catch((e) => {
      if (stale()) return;
      failed(error, e);
    });
    load('');
  }

  function caseView(c, reload, notice) {
    const open = c.state === 'open';
    const actionsBox = h('section', { class: 'card' }, h('h2', { text: 'Act' }));
    let actions = 0;
    const err = errorBox('case-action-error');
    const ok = noticeBox('case-action-notice');
    ok.textContent = notice || '';
    const act = async (form, action, note) => {
      clearErrors(err, ok);
      await busy(form, async () => {
        try {
          await api('POST', `/admin/v1/exceptions/${c.id}/${action}`, { note });
          await reload(`${action === 'replay' ? 'Replayed' : action === 'resolve' ? 'Resolved' : 'Dismissed'}.`);
        } catch (e) {
          failed(err, e, form);
        }
      });
    };
    if (c.replayable && open) {
      const replay = h('form', { id: 'replay-form' },
        h('label', { for: 'replay-note', text: 'Note (optional)' }),
        h('input', { id: 'replay-note', type: 'text', maxlength: '512' }),
        h('p', { class: 'field-error', 'data-field-error': 'note' }),
        h('button', { type: 'submit', id: 'replay', testid: 'replay', text: 'Replay' }));
      replay.addEventListener('submit', (ev) => {
        ev.preventDefault();
        act(replay, 'replay', byId('replay-note').value);
      });
      actionsBox.append(h('h3', { text: 'Replay' }),
        h('p', { class: 'muted', text: 'Replay sends the grab through the consumer again; fix the cause first.' }), replay);
      actions++;
    }
    if (c.state !== 'resolved' && c.state !== 'dismissed') {
      // One note, two outcomes: the submit button pressed decides which.
      const close = h('form', { id: 'close-case-form' },
        h('label', { for: 'close-note', text: 'Note (required: what you found or did)' }),
        h('textarea', { id: 'close-note', required: true, maxlength: '1024' }),
        h('p', { class: 'field-error', 'data-field-error': 'note' }),
        h('div', { class: 'actions' },
          h('button', { type: 'submit', id: 'resolve', testid: 'resolve', value: 'resolve', text: 'Resolve' }),
          h('button', { type: 'submit', id: 'dismiss', testid: 'dismiss', value: 'dismiss', class: 'secondary', text: 'Dismiss' })));
      close.addEventListener('submit', (ev) => {
        ev.preventDefault();
        const action = ev.submitter && ev.submitter.value === 'dismiss' ? 'dismiss' : 'resolve';
        act(close, action, byId('close-note').value);
      });
      actionsBox.append(h('h3', { text: 'Close the case' }), close);
      actions++;
    }
    actionsBox.append(err, ok);
    if (!actions) actionsBox.append(h('p', { class: 'muted', text: `This case is ${c.state}; nothing left to do.` }));

    return h('div', {},
      h('section', { class: 'card' },
        h('h1', { testid: 'case-title' }, `Case #${c.id} `, badge(c.kind), ' ', h('span', { testid: 'case-state' }, badge(c.state))),
        facts([
          ['Session / prize', `${c.session_id || dash} / ${c.prize_id || dash}`],
          ['Request', c.request_id || dash],
          ['User', c.user_id || dash],
          ['First seen', fmtTime(c.first_seen)],
          ['Last seen', `${fmtTime(c.last_seen)} (seen ${fmtNum(c.seen)} ${c.seen === 1 ? 'time' : 'times'})`],
          ['Replayable', c.replayable ? 'yes' : 'no'],
          ['Detail', h('span', { testid: 'case-detail', text: c.detail || dash })],
          ['State changed', c.state_changed_at ? `${fmtTime(c.state_changed_at)} by ${c.state_changed_by || dash}` : dash],
          ['State note', h('span', { testid: 'case-note', text: c.state_note || dash })],
        ])),
      actionsBox,
      h('section', { class: 'card' }, h('h2', { text: 'Evidence' }), kvTable(c.evidence || {}, 'case-evidence')),
      h('section', { class: 'card' }, h('h2', { text: 'Order' }),
        c.order ? kvTable(c.order, 'case-order') : h('p', { class: 'muted', testid: 'case-order', text: 'No order for this request.' })),
      h('section', { class: 'card' }, h('h2', { text: 'History' }),
        (c.actions || []).length
          ? table(['At', 'Who', 'Action', 'Note', 'Outcome'], c.actions.map((a) => h('tr', {},
            h('td', { text: fmtTime(a.at) }), h('td', { text: a.actor || dash }), h('td', { text: a.action }),
            h('td', { text: a.note || '' }), h('td', { text: a.outcome || '' }))), { testid: 'case-actions' })
          : h('p', { class: 'muted', testid: 'case-actions', text: 'Nobody has acted on this case yet.' })));
  }

  // ---------------------------------------------------------------- Reports

  function renderReports(page, _m, stale) {
    const error = errorBox('reports-error');
    const list = h('div', { testid: 'reports-list', text: 'loading…' });
    page.append(h('h1', { text: 'Reconciler runs' }), error, list);
    api('GET', '/admin/v1/reconciler/reports?limit=20').then((data) => {
      if (stale()) return;
      const reports = (data && data.reports) || [];
      if (!reports.length) {
        list.replaceChildren(h('p', { class: 'muted card', text: 'No runs recorded yet.' }));
        return;
      }
      list.replaceChildren(...reports.map((r) => h('section', { class: 'card', testid: `report-${r.id}` },
        h('div', { class: 'row spread' },
          h('h2', {}, `Run #${r.id} `, r.failed ? badge('failed') : badge('ok')),
          h('span', { class: 'muted', text: `${fmtTime(r.started_at)} · ${fmtNum(r.duration_ms)} ms · lease ${r.lease || dash} · fence ${r.fence ?? dash}` })),
        table(['Job', 'Result', 'Summary'], (r.jobs || []).map((j) => h('tr', {},
          h('td', { text: j.name }),
          h('td', { class: j.error ? 'error' : '', text: j.error ? j.error : 'ok' }),
          h('td', { text: Object.entries(j.summary || {}).map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`).join('  ') || dash })))))));
    }).catch((e) => {
      if (stale()) return;
      list.textContent = '';
      failed(error, e);
    });
  }

  // ---------------------------------------------------------------- start

  async function start() {
    byId('sign-in-form').addEventListener('submit', signIn);
    byId('sign-out').addEventListener('click', signOut);
    window.addEventListener('hashchange', () => {
      route();
      byId('view').focus({ preventScroll: true });
    });
    try {
      const who = await api('GET', '/console/session');
      signedIn(who);
    } catch {
      showSignIn('');
    }
  }
  start();
})();
