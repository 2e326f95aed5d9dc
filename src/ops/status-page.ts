// The status page served at GET /: one HTML document with its style and script inline (no build step, no files to
// serve, so it works on Workers too). It draws itself from GET /status.json, refreshed every few seconds.
import { STATUS_PAGE_SCRIPT } from './status-page-script.ts';

/** The page's inline style (its SHA-256 is in the Content-Security-Policy). */
export const STATUS_PAGE_STYLE = `
:root { color-scheme: light dark; --fg: #1b1f24; --muted: #57606a; --bg: #f6f8fa; --card: #fff; --line: #d0d7de; --good: #1a7f37; --warn: #9a6700; --bad: #cf222e; --accent: #0969da; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6edf3; --muted: #9198a1; --bg: #0d1117; --card: #161b22; --line: #30363d; --good: #3fb950; --warn: #d29922; --bad: #f85149; --accent: #4493f8; } }
* { box-sizing: border-box; }
[hidden] { display: none !important; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
header, main { max-width: 72rem; margin: 0 auto; padding: 0 1rem; }
header { padding-top: 1.25rem; }
h1 { font-size: 1.5rem; margin: 0; }
h2 { font-size: 1.1rem; margin: 1.75rem 0 .5rem; }
h3 { font-size: 1rem; margin: 1.25rem 0 .5rem; }
p { margin: .25rem 0; }
.muted, .note { color: var(--muted); font-size: .9rem; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(10rem, 1fr)); gap: .75rem; margin: 0; }
.cards > div { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: .6rem .8rem; }
.cards dt { color: var(--muted); font-size: .85rem; }
.cards dd { margin: .15rem 0 0; font-size: 1.35rem; font-variant-numeric: tabular-nums; }
.cards > div.alert { border-color: var(--bad); }
.cards > div.alert dd { color: var(--bad); }
table { width: 100%; border-collapse: collapse; background: var(--card); border: 1px solid var(--line); border-radius: 6px; font-size: .9rem; }
th, td { text-align: left; vertical-align: top; padding: .4rem .6rem; border-bottom: 1px solid var(--line); overflow-wrap: break-word; }
thead th { color: var(--muted); font-weight: 600; }
tbody th { font-weight: 600; }
td.empty { color: var(--muted); font-style: italic; }
tr.alert th { color: var(--bad); }
.state { font-weight: 600; }
.state.good { color: var(--good); }
.state.warn { color: var(--warn); }
.state.bad { color: var(--bad); }
#problem { color: var(--bad); font-weight: 600; }
form { display: flex; flex-wrap: wrap; gap: .5rem; align-items: center; }
input { font: inherit; padding: .3rem .5rem; border: 1px solid var(--line); border-radius: 6px; background: var(--card); color: var(--fg); min-width: 16rem; }
button { font: inherit; padding: .25rem .75rem; border: 1px solid var(--line); border-radius: 6px; background: var(--card); color: var(--accent); cursor: pointer; }
button:disabled { color: var(--muted); cursor: progress; }
:focus-visible { outline: 2px solid var(--accent); outline-offset: 2px; }
.visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden; clip-path: inset(50%); white-space: nowrap; }
footer { max-width: 72rem; margin: 2rem auto; padding: 0 1rem; }
`;

/** The whole document; `STATUS_PAGE_STYLE` and `STATUS_PAGE_SCRIPT` are its only inline style and script. */
export const STATUS_PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Service status</title>
<link rel="icon" href="data:,">
<style>${STATUS_PAGE_STYLE}</style>
</head>
<body>
<header>
<h1><span id="service">Service</span> status</h1>
<p id="updated" class="muted">Loading…</p>
<p id="problem" role="alert" hidden></p>
</header>
<main>
<section aria-labelledby="outbox-heading">
<h2 id="outbox-heading">Outbox</h2>
<dl class="cards">
<div><dt>Pending</dt><dd id="outbox-pending">—</dd></div>
<div><dt>Oldest pending</dt><dd id="outbox-oldest">—</dd></div>
<div><dt>Failed (parked)</dt><dd id="outbox-failed">—</dd></div>
<div><dt>Sent</dt><dd id="outbox-sent">—</dd></div>
</dl>
</section>
<section aria-labelledby="relay-heading">
<h2 id="relay-heading">Relay</h2>
<p id="relay-none" class="muted" hidden>This process runs no relay.</p>
<div id="relay-facts">
<dl class="cards">
<div><dt>Broker</dt><dd id="relay-state">—</dd></div>
<div><dt>Publish lag p50</dt><dd id="lag-p50">—</dd></div>
<div><dt>Publish lag p90</dt><dd id="lag-p90">—</dd></div>
<div><dt>Publish lag p99</dt><dd id="lag-p99">—</dd></div>
<div><dt>Published</dt><dd id="lag-observed">—</dd></div>
</dl>
<p class="note">Publish lag: from an event occurring to the broker's acknowledgement, estimated from the outbox_publish_lag_seconds buckets since this process started.</p>
</div>
</section>
<section aria-labelledby="subscribers-heading">
<h2 id="subscribers-heading">Subscribers</h2>
<p id="subscribers-none" class="muted" hidden>This process runs no subscriber.</p>
<table id="subscribers-table">
<caption class="visually-hidden">Each subscriber's broker and database state, backlog and dead letters</caption>
<thead><tr><th scope="col">Subscriber</th><th scope="col">Broker</th><th scope="col">Database</th><th scope="col">Not yet delivered</th><th scope="col">Unacknowledged</th><th scope="col">Dead letters</th><th scope="col">Note</th></tr></thead>
<tbody id="subscribers-body"></tbody>
</table>
</section>
<section aria-labelledby="errors-heading">
<h2 id="errors-heading">Recent warnings and errors</h2>
<table>
<caption class="visually-hidden">The last warnings and errors this process logged, newest first</caption>
<thead><tr><th scope="col">Time</th><th scope="col">Level</th><th scope="col">Message</th><th scope="col">Details</th></tr></thead>
<tbody id="errors-body"></tbody>
</table>
</section>
<section aria-labelledby="admin-heading">
<h2 id="admin-heading">Admin</h2>
<p id="admin-off" class="muted" hidden>Admin actions are off: this process has no ADMIN_TOKEN.</p>
<form id="token-form" hidden>
<label for="token">Admin token</label>
<input id="token" name="token" type="password" autocomplete="off" spellcheck="false" required>
<button type="submit">Use token</button>
</form>
<p id="token-set" hidden>Admin token set for this tab. <button type="button" id="forget">Forget token</button></p>
<p id="admin-message" role="status" aria-live="polite"></p>
<div id="admin-panel" hidden>
<h3 id="failed-heading">Failed outbox rows</h3>
<table aria-labelledby="failed-heading">
<thead><tr><th scope="col">Seq</th><th scope="col">Type</th><th scope="col">Aggregate</th><th scope="col">Attempts</th><th scope="col">Last error</th><th scope="col">Occurred</th><th scope="col">Action</th></tr></thead>
<tbody id="failed-body"></tbody>
</table>
<p id="failed-more" class="note"></p>
<h3 id="dead-heading">Dead letters</h3>
<table aria-labelledby="dead-heading">
<thead><tr><th scope="col">Subscriber</th><th scope="col">Event</th><th scope="col">Type or subject</th><th scope="col">Error</th><th scope="col">Deliveries</th><th scope="col">Dead since</th><th scope="col">Action</th></tr></thead>
<tbody id="dead-body"></tbody>
</table>
<p id="dead-more" class="note"></p>
</div>
</section>
</main>
<footer class="note">Numbers of this process: GET /status.json. Prometheus: GET /metrics.</footer>
<script>${STATUS_PAGE_SCRIPT}</script>
</body>
</html>
`;
