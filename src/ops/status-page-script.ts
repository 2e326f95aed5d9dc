// The status page's script, inlined by status-page.ts. Plain browser JavaScript with no build step. Every value
// from the server reaches the page through textContent, never as markup. The admin token lives only in this page's
// memory (not in storage another page of this origin, such as /docs, could read) and goes out only as an
// Authorization header to this origin.

/** The page's inline script (its SHA-256 is in the Content-Security-Policy). */
export const STATUS_PAGE_SCRIPT = `
(() => {
  'use strict';
  const REFRESH_MS = 3000;
  const PAGE = 20;
  const byId = (id) => document.getElementById(id);
  let token = '';
  let status = null;
  let timer;
  let running = null;
  let again = false;

  const num = (n) => (n === null || n === undefined ? '—' : Number(n).toLocaleString('en-US'));
  const age = (ms) => {
    const s = ms / 1000;
    if (s < 1) return Math.round(ms) + ' ms';
    if (s < 120) return s.toFixed(1) + ' s';
    if (s < 7200) return (s / 60).toFixed(1) + ' min';
    return (s / 3600).toFixed(1) + ' h';
  };
  const seconds = (q) => {
    if (!q) return '—';
    const t = q.value < 1 ? (q.value * 1000).toFixed(q.value < 0.01 ? 2 : 0) + ' ms' : q.value.toFixed(2) + ' s';
    return q.above ? '> ' + t : t;
  };
  const when = (value) => {
    if (value === null || value === undefined) return '—';
    const d = new Date(value);
    return Number.isNaN(d.getTime()) ? String(value) : d.toLocaleString('en-GB');
  };
  const setText = (id, value) => (byId(id).textContent = value);

  function badge(state) {
    const span = document.createElement('span');
    const tone = state === 'connected' || state === 'ok' ? 'good' : state === 'connecting' ? 'warn' : 'bad';
    span.className = 'state ' + tone;
    span.textContent = state;
    return span;
  }

  // The first cell names the row (a row header) unless told otherwise.
  function row(cells, named = true) {
    const tr = document.createElement('tr');
    cells.forEach((c, i) => {
      const header = named && i === 0;
      const cell = document.createElement(header ? 'th' : 'td');
      if (header) cell.scope = 'row';
      if (c instanceof Node) cell.append(c);
      else cell.textContent = c;
      tr.append(cell);
    });
    return tr;
  }

  function fill(id, rows, empty) {
    const body = byId(id);
    if (rows.length > 0) return body.replaceChildren(...rows);
    const td = document.createElement('td');
    td.colSpan = body.closest('table').querySelectorAll('thead th').length;
    td.className = 'empty';
    td.textContent = empty;
    const tr = document.createElement('tr');
    tr.append(td);
    body.replaceChildren(tr);
  }

  function say(text) {
    setText('admin-message', text);
  }

  function render(s) {
    status = s;
    document.title = s.service + ' — status';
    setText('service', s.service);
    setText('updated', 'Updated ' + when(s.time) + '; refreshes every ' + REFRESH_MS / 1000 + ' s.');
    setText('outbox-pending', num(s.outbox.pending));
    setText('outbox-oldest', s.outbox.pending > 0 ? age(s.outbox.oldestPendingAgeMs) : 'none pending');
    setText('outbox-failed', num(s.outbox.failed));
    setText('outbox-sent', num(s.outbox.sent));
    byId('outbox-failed').parentElement.classList.toggle('alert', s.outbox.failed > 0);

    byId('relay-none').hidden = s.relay !== null;
    byId('relay-facts').hidden = s.relay === null;
    if (s.relay) {
      byId('relay-state').replaceChildren(badge(s.relay.state));
      setText('lag-p50', seconds(s.relay.lag.p50));
      setText('lag-p90', seconds(s.relay.lag.p90));
      setText('lag-p99', seconds(s.relay.lag.p99));
      setText('lag-observed', num(s.relay.lag.observed));
    }

    byId('subscribers-none').hidden = s.subscribers !== null;
    byId('subscribers-table').hidden = s.subscribers === null;
    fill(
      'subscribers-body',
      (s.subscribers || []).map((x) => {
        const r = row([x.name, badge(x.broker), badge(x.database), num(x.pending), num(x.ackPending), x.deadLettersCapped ? num(x.deadLetters) + '+' : num(x.deadLetters), x.error || '']);
        if (x.deadLetters > 0) r.classList.add('alert');
        return r;
      }),
      'No subscribers.',
    );

    fill(
      'errors-body',
      s.errors
        .slice()
        .reverse()
        .map((e) => row([when(e.time), e.level, e.msg, Object.entries(e.fields).map(([k, v]) => k + '=' + v).join(' ')], false)),
      'Nothing logged at warn or error since the process started.',
    );

    byId('admin-off').hidden = s.admin;
    byId('token-form').hidden = !s.admin || token !== '';
    byId('token-set').hidden = !s.admin || token === '';
  }

  async function call(path, init) {
    let res;
    try {
      res = await fetch(path, { ...init, cache: 'no-store', headers: { Authorization: 'Bearer ' + token, Accept: 'application/json' } });
    } catch (e) {
      return { ok: false, status: 0, error: String((e && e.message) || e) };
    }
    const body = await res.json().catch(() => null);
    if (res.status === 401) {
      forgetToken('The token was refused; enter it again.');
      return { ok: false, status: 401, error: 'token refused' };
    }
    if (!res.ok) return { ok: false, status: res.status, error: (body && (body.detail || body.title)) || 'HTTP ' + res.status };
    return { ok: true, status: res.status, body };
  }

  function button(label, name, action) {
    const b = document.createElement('button');
    b.type = 'button';
    b.textContent = label;
    b.setAttribute('aria-label', name);
    b.addEventListener('click', async () => {
      b.disabled = true;
      await action();
      b.disabled = false;
    });
    return b;
  }

  async function retry(item) {
    const r = await call('admin/outbox/failed/' + encodeURIComponent(item.id) + '/retry', { method: 'POST' });
    say(r.ok ? 'Outbox row ' + item.seq + ' re-queued for publishing.' : 'Retry of outbox row ' + item.seq + ' failed: ' + r.error);
    await refresh();
  }

  async function replay(name, item) {
    const r = await call('admin/subscribers/' + encodeURIComponent(name) + '/dead-letters/' + encodeURIComponent(item.eventId) + '/replay', { method: 'POST' });
    const failed = r.ok && r.body && Array.isArray(r.body.failed) && r.body.failed.length > 0 ? r.body.failed[0].error : null;
    say(r.ok && !failed ? 'Dead letter ' + item.eventId + ' of ' + name + ' replayed.' : 'Replay of ' + item.eventId + ' failed: ' + (failed || r.error));
    await refresh();
  }

  async function refreshAdmin() {
    const panel = byId('admin-panel');
    if (!token || !status || !status.admin) return void (panel.hidden = true);
    const failed = await call('admin/outbox/failed?limit=' + PAGE);
    if (!token) return void (panel.hidden = true);
    panel.hidden = false;
    const items = failed.ok ? failed.body.items : [];
    fill(
      'failed-body',
      items.map((x) =>
        row([String(x.seq), x.messageType, x.aggregateType + ' ' + x.aggregateId, num(x.attempts), x.lastError || '', when(x.occurredAt), button('Retry', 'Retry outbox row ' + x.seq, () => retry(x))]),
      ),
      failed.ok ? 'No failed outbox rows.' : 'Could not list failed rows: ' + failed.error,
    );
    setText('failed-more', failed.ok && failed.body.next ? 'Showing the oldest ' + items.length + ' of ' + num(status.outbox.failed) + '.' : '');

    const subs = await call('admin/subscribers');
    const rows = [];
    let note = '';
    if (subs.ok) {
      for (const s of subs.body.items.filter((x) => x.deadLetters > 0)) {
        const dead = await call('admin/subscribers/' + encodeURIComponent(s.name) + '/dead-letters?limit=' + PAGE);
        if (!dead.ok) {
          note += 'Could not list the dead letters of ' + s.name + ': ' + dead.error + ' ';
          continue;
        }
        for (const d of dead.body.items) {
          rows.push(row([s.name, d.eventId, d.type || d.subject, d.error, num(d.deliveries), when(d.deadAt), button('Replay', 'Replay dead letter ' + d.eventId + ' of ' + s.name, () => replay(s.name, d))]));
        }
        if (dead.body.next) note += 'Showing the oldest ' + dead.body.items.length + ' of ' + num(s.deadLetters) + ' dead letters of ' + s.name + '. ';
      }
    } else if (subs.status !== 401) {
      note = subs.status === 404 ? 'This process runs no subscriber.' : 'Could not list subscribers: ' + subs.error;
    }
    fill('dead-body', rows, 'No dead letters.');
    setText('dead-more', note.trim());
  }

  async function once() {
    clearTimeout(timer);
    try {
      const res = await fetch('status.json', { cache: 'no-store', headers: token ? { Accept: 'application/json', Authorization: 'Bearer ' + token } : { Accept: 'application/json' } });
      if (!res.ok) throw new Error('HTTP ' + res.status);
      render(await res.json());
      byId('problem').hidden = true;
      await refreshAdmin();
    } catch (e) {
      setText('problem', 'Could not load the status: ' + ((e && e.message) || e));
      byId('problem').hidden = false;
    }
  }

  function refresh() {
    if (running) {
      again = true;
      return running;
    }
    running = (async () => {
      do {
        again = false;
        await once();
      } while (again);
      running = null;
      timer = setTimeout(refresh, REFRESH_MS);
    })();
    return running;
  }

  function forgetToken(why) {
    token = '';
    byId('admin-panel').hidden = true;
    if (status) render(status);
    say(why);
  }

  byId('token-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const input = byId('token');
    token = input.value.trim();
    input.value = '';
    say(token ? 'Token kept in this page until you forget it or leave the page.' : '');
    void refresh();
  });
  byId('forget').addEventListener('click', () => forgetToken('Token forgotten.'));
  document.addEventListener('visibilitychange', () => document.hidden || void refresh());
  void refresh();
})();
`;
