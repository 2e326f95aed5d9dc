// npm run bench:outage [-- --rows 900000] [--rate 500] [--outage-seconds 60] [--normal-seconds 20] [--normal-backlog 30000] [--normal-rounds 3]
//                         [--warmup 5] [--chunk 10000] [--scrape-seconds 2] [--drain-seconds 900] [--quick]
// A 30-minute broker outage at 500 commands/s (900,000 outbox rows), time-compressed, against the production
// topology: the API process (`src/entry/node.ts`, ROLES=api) and the relay as its own process (`npm run relay`,
// src/entry/relay.ts, ROLES=relay, /metrics on METRICS_PORT), one libSQL file, a private nats-server.
//   1. normal: `rate` POST /orders per second (open model, latency from due time) with the broker up;
//   2. normal drain: `normal-backlog` pending rows inserted at once, drained by the relay with the broker up, done
//      `normal-rounds` times (default 3; each lasts about a second), the median rate reported;
//      each drain is timed by the stream, from its first message's store time to its last's (the rows' sent_at,
//      written after a batch's PubAcks, is reported too);
//   3. outage: nats-server stopped; `rate` POST/s for `outage-seconds` (POST latency during the outage), then the
//      rest of `rows` inserted in bulk as the service writes them (bench/variants/outbox-backlog.ts), then the broker
//      stays down until the stuck-outbox alert would fire (bounded);
//   4. recovery: nats-server restarted on the same port and store dir; the relay drains the backlog;
//   5. compaction: compactOutbox (bench/variants/compact.ts, what `npm run cli -- outbox:compact` runs) deletes every
//      sent row, then gives the freed pages back (auto_vacuum = INCREMENTAL);
//   6. the same backlog without an outage: the relay process stopped, `rows` pending rows inserted with the broker up,
//      a relay process started again over them; its drain is the relay's normal rate on a backlog of that size.
// Sampled all along: the relay's VmRSS every 500 ms (and VmHWM) until step 6, the database file and its -wal, and
// /metrics of both processes every `scrape-seconds`, on which (up to step 6) the alert rules of
// ops/prometheus/alerts.yml are evaluated.
// Bounded: an outer time limit stops everything. No assertion on timings.
import { createClient, type Client } from '@libsql/client';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { DEFAULT_SERVICE_NAME, streamNameOf } from '../src/service-name.ts';
import { createTempDir } from '../test/support/db.ts';
import { orderBody } from '../test/support/example-orders.ts';
import { freePort, ROOT, runtimeCommand, waitForHttp } from '../test/support/process.ts';
import { startChild, startServer, type Child } from './variants/launch.ts';
import { describeMachine } from './variants/machine.ts';
import { insertPendingOrders } from './variants/outbox-backlog.ts';
import { runPacedLoad, summarize, type Sample } from './variants/paced-load.ts';
import { numberArg, percentile, round, saveResult, startNats, waitFor } from './support.ts';

const QUICK = process.argv.includes('--quick');
const ROWS = numberArg('rows', QUICK ? 50_000 : 900_000);
const RATE = numberArg('rate', 500);
const OUTAGE_SECONDS = numberArg('outage-seconds', QUICK ? 15 : 60);
const NORMAL_SECONDS = numberArg('normal-seconds', QUICK ? 8 : 20);
const NORMAL_BACKLOG = numberArg('normal-backlog', QUICK ? 10_000 : 30_000);
const NORMAL_ROUNDS = Math.max(1, numberArg('normal-rounds', 3));
const WARMUP = numberArg('warmup', 5);
const CHUNK = numberArg('chunk', 10_000);
const SCRAPE_MS = numberArg('scrape-seconds', 2) * 1000;
const DRAIN_MS = numberArg('drain-seconds', QUICK ? 300 : 900) * 1000;
/** The broker stays down at most this long past the bulk insert while waiting for the alert to fire. */
const HOLD_LIMIT_MS = 240_000;
const TIME_LIMIT_MS = (QUICK ? 12 : 45) * 60_000;
const MB = 1024 * 1024;

// ---------------------------------------------------------------------------------------------------------------
// The alert rules: ops/prometheus/alerts.yml, evaluated on our own scrapes (one job, max over the two processes)

type Rule = { alert: string; cause?: string; expr: string; forMs: number; metric: string; op: string; threshold: number };

/** `1m`, `30s`, `5m` … as Prometheus writes `for:` (absent: 0). */
function promDuration(text: string | undefined): number {
  if (!text) return 0;
  let ms = 0;
  for (const [, n, unit] of text.matchAll(/(\d+)(ms|s|m|h|d)/g)) ms += Number(n) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[unit as 'ms']!;
  return ms;
}

/** The stuck-outbox rules: the oldest pending row's age, and the relay not reaching the broker. */
function stuckOutboxRules(): Rule[] {
  const doc = parseYaml(readFileSync(join(ROOT, 'ops/prometheus/alerts.yml'), 'utf8')) as {
    groups: Array<{ rules: Array<{ alert: string; expr: string; for?: string; labels?: Record<string, string> }> }>;
  };
  const rules: Rule[] = [];
  for (const r of doc.groups.flatMap((g) => g.rules)) {
    // `[max by (…) (]metric[)] op number`: the shapes of the two rules this benchmark shows
    const m = /^\s*(?:max by \([^)]*\)\s*\()?\s*([a-z_]+)\s*\)?\s*(>=|<=|==|!=|>|<)\s*([\d.]+)\s*$/.exec(r.expr);
    if (!m) continue;
    if (m[1] !== 'outbox_oldest_pending_age_seconds' && m[1] !== 'outbox_relay_broker_up') continue;
    rules.push({
      alert: r.alert,
      ...(r.labels?.cause ? { cause: r.labels.cause } : {}),
      expr: r.expr.trim(),
      forMs: promDuration(r.for),
      metric: m[1]!,
      op: m[2]!,
      threshold: Number(m[3]),
    });
  }
  return rules;
}

const compare = (v: number, op: string, t: number) =>
  op === '>' ? v > t : op === '<' ? v < t : op === '>=' ? v >= t : op === '<=' ? v <= t : op === '==' ? v === t : v !== t;

type Scrape = { at: number; ms: Record<string, number>; values: Record<string, number | undefined> };

/** Each rule over the scrapes: when its condition turned true/false, and when the alert fired/resolved (`for:` held). */
function evaluate(rule: Rule, scrapes: Scrape[], origin: number) {
  const transitions: Array<{ at: number; tSeconds: number; condition: boolean | 'no data' }> = [];
  let prev: boolean | 'no data' | undefined;
  let trueSince: number | undefined;
  let firedAt: number | undefined;
  let resolvedAt: number | undefined;
  let noData = 0;
  for (const s of scrapes) {
    const v = s.values[rule.metric];
    const cond: boolean | 'no data' = v === undefined ? 'no data' : compare(v, rule.op, rule.threshold);
    if (cond === 'no data') noData++;
    if (cond !== prev) transitions.push({ at: s.at, tSeconds: round((s.at - origin) / 1000, 1), condition: cond });
    prev = cond;
    if (cond === true) {
      trueSince ??= s.at;
      if (firedAt === undefined && s.at - trueSince >= rule.forMs) firedAt = s.at;
    } else {
      // Prometheus resets a pending alert when the series is absent too
      trueSince = undefined;
      if (firedAt !== undefined && resolvedAt === undefined) resolvedAt = s.at;
    }
  }
  const t = (at: number | undefined) => (at === undefined ? null : round((at - origin) / 1000, 1));
  return {
    alert: rule.alert,
    ...(rule.cause ? { cause: rule.cause } : {}),
    expr: rule.expr,
    forSeconds: rule.forMs / 1000,
    transitions,
    firedAtSeconds: t(firedAt),
    resolvedAtSeconds: t(resolvedAt),
    scrapesWithoutTheSeries: noData,
  };
}

function parseMetrics(text: string, into: Record<string, number | undefined>): void {
  for (const name of ['outbox_oldest_pending_age_seconds', 'outbox_pending_messages', 'outbox_relay_broker_up', 'outbox_published_total']) {
    const m = new RegExp(`^${name}(?:\\{[^}]*\\})? ([^\\s]+)$`, 'm').exec(text);
    if (!m) continue;
    const v = Number(m[1]);
    // max over the processes that export it (the rules take max by job)
    into[name] = into[name] === undefined ? v : Math.max(into[name]!, v);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Samplers: relay RSS, database file sizes, /metrics

function procStatusKb(pid: number | undefined, field: 'VmRSS' | 'VmHWM'): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

const fileSize = (path: string) => (existsSync(path) ? statSync(path).size : 0);

type DbSize = { mainBytes: number; walBytes: number; totalMB: number };
function dbSize(path: string): DbSize {
  const mainBytes = fileSize(path);
  const walBytes = fileSize(`${path}-wal`);
  return { mainBytes, walBytes, totalMB: round((mainBytes + walBytes) / MB, 1) };
}

async function scalar(client: Client, sql: string, args: Array<string | number> = []): Promise<number> {
  return Number((await client.execute({ sql, args })).rows[0]![0] ?? 0);
}

/** Drain figures of the rows with seq > afterSeq, from their sent_at (ms, one clock). */
async function drainOf(client: Client, afterSeq: number, startedAt: number) {
  const r = (
    await client.execute({
      sql: "SELECT count(*) AS n, min(sent_at) AS first, max(sent_at) AS last, sum(status = 'pending') AS pending FROM outbox WHERE seq > ?",
      args: [afterSeq],
    })
  ).rows[0]!;
  const n = Number(r.n);
  const first = Number(r.first);
  const last = Number(r.last);
  return {
    rows: n,
    notSent: Number(r.pending ?? 0),
    /** first → last mark-sent: the relay's own pace once it publishes */
    steadyRatePerSec: last > first ? Math.round((n - 1) / ((last - first) / 1000)) : NaN,
    /** from `startedAt` (backlog committed, or broker restarted) to the last row marked sent */
    fromStartSeconds: round((last - startedAt) / 1000, 1),
    rateFromStartPerSec: last > startedAt ? Math.round(n / ((last - startedAt) / 1000)) : NaN,
    firstSentAfterSeconds: round((first - startedAt) / 1000, 1),
  };
}

/** The stream the service publishes to: derived from its default service name, as the service derives it. */
const STREAM = streamNameOf(DEFAULT_SERVICE_NAME);

/** Runs `fn` with a JetStream manager on a connection of its own to `url`, closed afterwards. */
async function withManager<T>(url: string, fn: (jsm: JetStreamManager) => Promise<T>): Promise<T> {
  const nc = await connect({ servers: [url] });
  try {
    return await fn(await jetstreamManager(nc));
  } finally {
    await nc.close();
  }
}

/** The stream's last sequence now (0 when it holds nothing yet). */
const streamLastSeq = (url: string) => withManager(url, async (jsm) => (await jsm.streams.info(STREAM)).state.last_seq);

/**
 * The broker's view of a drain: the messages stored after sequence `afterSeq`, from the first one's store time to the
 * last one's. Unlike the rows' sent_at (taken when a mark is written, after a batch's PubAcks), it starts at the first
 * publish, so a drain of a second is not favoured by the marks' timing.
 */
function streamDrainOf(url: string, afterSeq: number) {
  return withManager(url, async (jsm) => {
    const { state } = await jsm.streams.info(STREAM);
    const stored = state.last_seq - afterSeq;
    if (stored < 2) return { stored, ratePerSec: NaN };
    const message = await jsm.streams.getMessage(STREAM, { seq: afterSeq + 1 });
    if (!message) return { stored, ratePerSec: NaN };
    const first = message.time.getTime();
    const last = Date.parse(state.last_ts);
    return { stored, ratePerSec: last > first ? Math.round((stored - 1) / ((last - first) / 1000)) : NaN, firstStoredAt: first };
  });
}

/**
 * Pauses of this (the load-generating) process's own event loop longer than `thresholdMs`: each as its end time
 * (epoch ms) and length. A request due during one is sent late and its latency, timed from its due time, includes the
 * pause, so POST latency spikes that coincide with these are the generator's, not the service's.
 */
function watchOwnStalls(thresholdMs = 40): { stalls: Array<{ at: number; ms: number }>; stop(): void } {
  const stalls: Array<{ at: number; ms: number }> = [];
  const tickMs = 10;
  let last = performance.now();
  const timer = setInterval(() => {
    const t = performance.now();
    const late = t - last - tickMs;
    if (late > thresholdMs) stalls.push({ at: Date.now(), ms: Math.round(late) });
    last = t;
  }, tickMs);
  return { stalls, stop: () => clearInterval(timer) };
}

/** The stream's messages and bytes now (undefined when it cannot be read). */
function streamSizeOf(url: string): Promise<{ messages: number; bytes: number } | undefined> {
  return withManager(url, async (jsm) => {
    const { state } = await jsm.streams.info(STREAM);
    return { messages: state.messages, bytes: state.bytes };
  }).catch(() => undefined);
}

/** Empties the stream (its sequence goes on), so a second backlog as large fits its STREAM_MAX_BYTES. */
const purgeStream = (url: string) => withManager(url, (jsm) => jsm.streams.purge(STREAM));

// ---------------------------------------------------------------------------------------------------------------

async function main() {
  const started = Date.now();
  const nats = await startNats();
  const tmp = createTempDir('hono-outbox-outage-');
  const dbPath = join(tmp.dir, 'app.db');
  const url = `file:${dbPath}`;
  const children: Child[] = [];
  const timers: NodeJS.Timeout[] = [];
  let db: Client | undefined;
  const cleanup = async () => {
    for (const t of timers) clearInterval(t);
    db?.close();
    for (const c of children.splice(0).reverse()) await c.stop();
    tmp[Symbol.dispose]();
    await nats[Symbol.asyncDispose]();
  };
  const limit = setTimeout(() => {
    console.error(`outage: stopped by the time limit (${TIME_LIMIT_MS / 60_000} min)`);
    void cleanup().finally(() => process.exit(3));
  }, TIME_LIMIT_MS);
  limit.unref();

  try {
    const env = { DATABASE_URL: url, NATS_URL: nats.url, LOG_LEVEL: 'warn' };
    const api = await startServer('api', 'node', 'src/entry/node.ts', { ...env, ROLES: 'api' });
    children.push(api);
    const metricsPort = await freePort();
    const { cmd, args } = runtimeCommand('node', 'src/entry/relay.ts');
    const relay = startChild('relay', cmd, args, { ...env, HOST: '127.0.0.1', METRICS_PORT: String(metricsPort) });
    children.push(relay);
    const relayUrl = `http://127.0.0.1:${metricsPort}`;
    await waitForHttp(`${relayUrl}/health`, { timeoutMs: 60_000 }).catch((error: unknown) => {
      throw new Error(`the relay did not start: ${String(error)}\n${relay.output()}`);
    });
    const relayPid = relay.proc.pid;
    db = createClient({ url, timeout: 5000 });
    const rules = stuckOutboxRules();
    const machine = await describeMachine();

    // samplers --------------------------------------------------------------------------------------------------
    const rss: Array<[t: number, kb: number]> = [];
    const rssTimer = setInterval(() => {
      const kb = procStatusKb(relayPid, 'VmRSS');
      if (kb !== undefined) rss.push([Date.now(), kb]);
    }, 500);
    timers.push(rssTimer);
    let peakDb: DbSize & { at: number } = { ...dbSize(dbPath), at: Date.now() };
    timers.push(
      setInterval(() => {
        const s = dbSize(dbPath);
        if (s.mainBytes + s.walBytes > peakDb.mainBytes + peakDb.walBytes) peakDb = { ...s, at: Date.now() };
      }, 1000),
    );
    const scrapes: Scrape[] = [];
    let scraping = false;
    timers.push(
      setInterval(() => {
        if (scraping) return;
        scraping = true;
        const at = Date.now();
        const scrape: Scrape = { at, ms: {}, values: {} };
        void Promise.all(
          [
            ['api', api.url],
            ['relay', relayUrl],
          ].map(async ([name, base]) => {
            const t0 = performance.now();
            try {
              const text = await (await fetch(`${base}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
              parseMetrics(text, scrape.values);
            } catch {
              // not answered in time: its series are absent from this scrape
            }
            scrape.ms[name!] = Math.round(performance.now() - t0);
          }),
        ).then(() => {
          scrapes.push(scrape);
          scraping = false;
        });
      }, SCRAPE_MS),
    );
    const since = (at: number) => round((at - started) / 1000, 1);
    const log = (msg: string) => console.log(`[${since(Date.now()).toFixed(1).padStart(6)} s] ${msg}`);
    const pending = () => scalar(db!, "SELECT count(*) FROM outbox WHERE status = 'pending'");
    // the drains' poll: whether any row is pending, which stops at the first one (a count walks every pending row,
    // 50–65 ms at 900,000 of them, on the same two cores as the drain it waits for)
    const drainedNow = async () => (await scalar(db!, "SELECT EXISTS (SELECT 1 FROM outbox WHERE status = 'pending')")) === 0;
    const maxSeq = () => scalar(db!, 'SELECT coalesce(max(seq), 0) FROM outbox');
    const body = JSON.stringify(orderBody());
    const postUrl = `${api.url}/orders`;

    log(`outage: api (src/entry/node.ts, ROLES=api) + relay process (src/entry/relay.ts, pid ${relayPid}); ${RATE} POST/s; backlog ${ROWS} rows`);

    // 1. normal POST latency -------------------------------------------------------------------------------------
    const normalStart = Date.now();
    const normalStalls = watchOwnStalls();
    const normalLoad = await runPacedLoad({ url: postUrl, body, rate: RATE, maxMs: (WARMUP + NORMAL_SECONDS) * 1000 });
    normalStalls.stop();
    const generatorStallsNormal = normalStalls.stalls
      .filter((x) => x.at >= normalStart + WARMUP * 1000)
      .map((x) => ({ second: Math.floor((x.at - normalStart) / 1000) - WARMUP, ms: x.ms }));
    const normalSamples = normalLoad.samples.filter((s) => s.dueAt >= normalStart + WARMUP * 1000);
    const normal = summarize(normalSamples, percentile);
    log(`normal: POST p50 ${normal.p50Ms} ms, p99 ${normal.p99Ms} ms (${normal.requests} requests, ${normal.failed} failed, sent ${normalLoad.sentRate}/s)`);
    await waitFor(drainedNow, 60_000);
    const sampleHeaders = String(
      (await db.execute("SELECT headers FROM outbox WHERE message_type = 'order.placed.v1' ORDER BY seq DESC LIMIT 1")).rows[0]?.headers ?? '{}',
    );
    const postPayloadBytes = await scalar(db, 'SELECT avg(length(payload)) FROM outbox');

    // 2. the relay's normal drain rate: the median of NORMAL_ROUNDS drains (one lasts about a second) -----------
    const normalRounds: Array<Awaited<ReturnType<typeof drainOf>> & { stream: Awaited<ReturnType<typeof streamDrainOf>>; insertMs: number; drained: boolean }> =
      [];
    for (let round = 0; round < NORMAL_ROUNDS; round++) {
      const normalSeq = await maxSeq();
      const streamSeq = await streamLastSeq(nats.url);
      const normalInsert = await insertPendingOrders(db, NORMAL_BACKLOG, { chunk: NORMAL_BACKLOG, sampleHeaders });
      const normalCommitted = Date.now();
      const drained = await waitFor(drainedNow, 300_000, 200);
      const drain = { ...(await drainOf(db, normalSeq, normalCommitted)), stream: await streamDrainOf(nats.url, streamSeq) };
      normalRounds.push({ ...drain, insertMs: normalInsert.ms, drained });
      log(
        `normal drain ${round + 1}/${NORMAL_ROUNDS}: ${drain.rows} rows at ${drain.stream.ratePerSec} ev/s (first → last stored), ${drain.steadyRatePerSec} ev/s (first → last sent), ${drain.rateFromStartPerSec} ev/s from commit${drained ? '' : ' (NOT drained)'}`,
      );
    }
    const normalDrain = [...normalRounds].sort((a, b) => a.stream.ratePerSec - b.stream.ratePerSec)[Math.floor((NORMAL_ROUNDS - 1) / 2)]!;
    const normalBySent = [...normalRounds].sort((a, b) => a.steadyRatePerSec - b.steadyRatePerSec)[Math.floor((NORMAL_ROUNDS - 1) / 2)]!;
    const normalDrained = normalRounds.every((r) => r.drained);
    const rssBeforeOutageKb = procStatusKb(relayPid, 'VmRSS');
    const pageSize = await scalar(db, 'PRAGMA page_size');
    const autoVacuum = await scalar(db, 'PRAGMA auto_vacuum');
    const beforeOutage = { ...dbSize(dbPath), rows: await scalar(db, 'SELECT count(*) FROM outbox') };
    log(`database before the outage: ${beforeOutage.totalMB} MB (${beforeOutage.rows} rows; auto_vacuum ${autoVacuum}, page ${pageSize} B)`);

    // 3. the outage ---------------------------------------------------------------------------------------------
    const outageSeq = await maxSeq();
    const outageStreamSeq = await streamLastSeq(nats.url);
    await nats.stop();
    const outageStart = Date.now();
    log(`broker stopped; ${RATE} POST/s for ${OUTAGE_SECONDS} s`);
    const ownStalls = watchOwnStalls();
    const outageLoad = await runPacedLoad({ url: postUrl, body, rate: RATE, maxMs: OUTAGE_SECONDS * 1000 });
    ownStalls.stop();
    const generatorStalls = ownStalls.stalls.map((x) => ({ second: Math.floor((x.at - outageStart) / 1000), ms: x.ms }));
    const during = summarize(outageLoad.samples, percentile);
    const duringAfterFirst5s = summarize(
      outageLoad.samples.filter((s: Sample) => s.dueAt >= outageStart + 5000),
      percentile,
    );
    log(`during the outage: POST p50 ${during.p50Ms} ms, p99 ${during.p99Ms} ms (${during.requests} requests, ${during.failed} failed)`);
    // where the slow requests of the outage fell: the seconds (from the broker stop) holding any slower than twice
    // the normal p99, with how many and the slowest, so a tail is told apart from a stall
    const slowSeconds = new Map<number, { n: number; maxMs: number }>();
    for (const sample of outageLoad.samples) {
      if (sample.latencyMs <= 2 * normal.p99Ms) continue;
      const second = Math.floor((sample.dueAt - outageStart) / 1000);
      const entry = slowSeconds.get(second) ?? { n: 0, maxMs: 0 };
      slowSeconds.set(second, { n: entry.n + 1, maxMs: Math.max(entry.maxMs, round(sample.latencyMs, 1)) });
    }
    const slowDuringOutage = [...slowSeconds].map(([second, v]) => ({ second, ...v }));
    const posted = (await maxSeq()) - outageSeq;
    const bulkRows = Math.max(0, ROWS - posted);
    log(`bulk insert of ${bulkRows} more pending rows, ${CHUNK} per transaction`);
    let lastReport = Date.now();
    const bulk = await insertPendingOrders(db, bulkRows, {
      chunk: CHUNK,
      sampleHeaders,
      onChunk: (p) => {
        if (Date.now() - lastReport > 10_000) {
          lastReport = Date.now();
          log(`  ${p.inserted} inserted`);
        }
      },
    });
    const backlog = await pending();
    log(
      `backlog: ${backlog} pending rows; bulk insert ${bulk.ms} ms (${Math.round(bulk.inserted / (bulk.ms / 1000))} rows/s, payload ${bulk.avgPayloadBytes} B)`,
    );
    const atPeakRows = { ...dbSize(dbPath), rows: await scalar(db, 'SELECT count(*) FROM outbox') };
    // the broker stays down until every stuck-outbox alert fired (or HOLD_LIMIT_MS)
    const held = await waitFor(async () => rules.every((r) => evaluate(r, scrapes, outageStart).firedAtSeconds !== null), Math.max(0, HOLD_LIMIT_MS), 1000);
    const rssAtRestartKb = procStatusKb(relayPid, 'VmRSS');

    // 4. recovery -----------------------------------------------------------------------------------------------
    await nats.restart();
    const restartAt = Date.now();
    const outageSeconds = round((restartAt - outageStart) / 1000, 1);
    log(`broker restarted after ${outageSeconds} s${held ? '' : ' (before every alert fired: hold limit)'}; draining ${backlog} rows`);
    let lastLog = Date.now();
    const drained = await waitFor(
      async () => {
        if (Date.now() - lastLog > 15_000) {
          lastLog = Date.now();
          log(`  ${await pending()} pending, relay RSS ${Math.round((procStatusKb(relayPid, 'VmRSS') ?? 0) / 1024)} MB`);
        }
        return drainedNow();
      },
      DRAIN_MS,
      1000,
    );
    const drainedAt = Date.now();
    const outageDrain = { ...(await drainOf(db, outageSeq, restartAt)), stream: await streamDrainOf(nats.url, outageStreamSeq) };
    log(
      `outage drain: ${outageDrain.rows} rows at ${outageDrain.stream.ratePerSec} ev/s (first → last stored), ${outageDrain.steadyRatePerSec} ev/s (first → last sent), ${outageDrain.fromStartSeconds} s from the restart (${outageDrain.rateFromStartPerSec} ev/s)${drained ? '' : ' (NOT drained)'}`,
    );
    // a few more scrapes, so the alert conditions are seen turning off
    await new Promise((r) => setTimeout(r, Math.max(3 * SCRAPE_MS, 5000)));
    const afterDrain = { ...dbSize(dbPath), rows: await scalar(db, 'SELECT count(*) FROM outbox') };

    // 5. compaction and incremental vacuum ------------------------------------------------------------------------
    const pagesBefore = await scalar(db, 'PRAGMA page_count');
    const compactor = startChild('compactor', cmd, ['--import', 'tsx', 'bench/variants/compact.ts'], {
      ...env,
      COMPACT_CUTOFF_MS: String(Date.now() + 1000),
      COMPACT_BATCH: String(CHUNK),
    });
    children.push(compactor);
    const lines: Array<{ step: string; at: number; deleted?: number; batches?: number; batchMs?: number; pagesFreed?: number }> = [];
    compactor.onLine((line) => {
      if (line.startsWith('{')) lines.push(JSON.parse(line) as (typeof lines)[number]);
    });
    await compactor.exited;
    const cStart = lines.find((l) => l.step === 'start');
    const cDone = lines.find((l) => l.step === 'done');
    if (!cStart || !cDone) throw new Error(`the compactor did not finish:\n${compactor.output()}`);
    const batchLines = lines.filter((l) => l.step === 'batch');
    const lastBatchAt = batchLines.at(-1)?.at ?? cStart.at;
    const afterCompaction = { ...dbSize(dbPath), rows: await scalar(db, 'SELECT count(*) FROM outbox') };
    const pagesAfter = await scalar(db, 'PRAGMA page_count');
    const freelistAfter = await scalar(db, 'PRAGMA freelist_count');
    await db.execute('PRAGMA wal_checkpoint(TRUNCATE)');
    const afterCheckpoint = dbSize(dbPath);
    log(
      `compaction: ${cDone.deleted} rows in ${cDone.batches} batches, ${cDone.at - cStart.at} ms (deleting ${lastBatchAt - cStart.at} ms, vacuum ${cDone.at - lastBatchAt} ms), ${cDone.pagesFreed ?? 0} pages freed`,
    );

    // 6. the same backlog without an outage: the relay's normal rate on a backlog of this size ---------------------
    // The relay process is stopped (SIGTERM), `rows` pending rows are inserted, and a relay process starts again on
    // the same metrics port, scraped as before; its drain, timed by the stream, differs from the outage's mainly in
    // the outage (it also runs last, in a relay process just started, into a purged stream and a compacted file). The stream is purged first: both backlogs would not fit its STREAM_MAX_BYTES (`discard: new`, so the
    // relay would back off at a full stream). The scrapes so far are the ones the alerts are evaluated on.
    const alertScrapes = scrapes.length;
    const relayHwmKb = procStatusKb(relayPid, 'VmHWM');
    const relayOutput = relay.output();
    clearInterval(rssTimer);
    await relay.stop();
    children.splice(children.indexOf(relay), 1);
    // a relay that did not end on SIGTERM (killed after the grace) left its leases to run out: the next one would
    // start on a share of the partitions
    const relayExit = { code: relay.proc.exitCode, signal: relay.proc.signalCode };
    const sameSeq = await maxSeq();
    // the stream after the outage drain, as the sizing reports it
    const streamInfo = await streamSizeOf(nats.url);
    await purgeStream(nats.url);
    const sameStreamSeq = await streamLastSeq(nats.url);
    log(`relay stopped; inserting the same backlog (${ROWS} rows) with the broker up`);
    const sameInsert = await insertPendingOrders(db, ROWS, { chunk: CHUNK, sampleHeaders });
    const relayAgain = startChild('relay-again', cmd, args, { ...env, HOST: '127.0.0.1', METRICS_PORT: String(metricsPort) });
    children.push(relayAgain);
    const relayAgainStarted = Date.now();
    const sameDrained = await Promise.race([
      waitFor(drainedNow, DRAIN_MS, 1000),
      relayAgain.exited.then((code) => {
        throw new Error(`the restarted relay exited (${code}) before the backlog drained:\n${relayAgain.output().slice(-2000)}`);
      }),
    ]);
    const sameDrain = { ...(await drainOf(db, sameSeq, relayAgainStarted)), stream: await streamDrainOf(nats.url, sameStreamSeq) };
    log(
      `same backlog, no outage: ${sameDrain.rows} rows at ${sameDrain.stream.ratePerSec} ev/s (first → last stored), ${sameDrain.steadyRatePerSec} ev/s (first → last sent)${sameDrained ? '' : ' (NOT drained)'}; inserted in ${sameInsert.ms} ms`,
    );

    // stop the samplers, then the processes --------------------------------------------------------------------
    for (const t of timers.splice(0)) clearInterval(t);
    const relayAgainOutput = relayAgain.output();
    for (const c of children.splice(0).reverse()) await c.stop();
    db.close();
    db = undefined;
    const afterStop = dbSize(dbPath);

    // results --------------------------------------------------------------------------------------------------
    const rssPeakKb = rss.reduce((m, [, kb]) => Math.max(m, kb), 0);
    const rssDuringDrain = rss.filter(([t]) => t >= restartAt && t <= drainedAt).map(([, kb]) => kb);
    const alerts = rules.map((r) => evaluate(r, scrapes.slice(0, alertScrapes), outageStart));
    const scrapeMs = (name: string) => {
      const v = scrapes.map((s) => s.ms[name]).filter((x): x is number => x !== undefined);
      return { p50: percentile(v, 50), p99: percentile(v, 99), max: v.length ? Math.max(...v) : NaN, scrapes: v.length };
    };
    const bytesPerRow =
      (atPeakRows.mainBytes + atPeakRows.walBytes - beforeOutage.mainBytes - beforeOutage.walBytes) / Math.max(1, atPeakRows.rows - beforeOutage.rows);
    const result = {
      bench: 'outage',
      quick: QUICK,
      topology: 'api process (src/entry/node.ts, ROLES=api) + relay process (npm run relay: src/entry/relay.ts, ROLES=relay, METRICS_PORT), one libSQL file',
      rate: RATE,
      rows: ROWS,
      simulatedOutageMinutesAtRate: round(ROWS / RATE / 60, 1),
      outage: {
        seconds: outageSeconds,
        postedDuringOutage: posted,
        bulkInserted: bulk.inserted,
        bulkInsertMs: bulk.ms,
        bulkRowsPerSec: Math.round(bulk.inserted / (bulk.ms / 1000)),
        backlogAtRestart: backlog,
        heldUntilAlertsFired: held,
      },
      payloadBytes: { post: Math.round(postPayloadBytes), bulk: bulk.avgPayloadBytes },
      post: {
        normal,
        normalSentRate: normalLoad.sentRate,
        duringOutage: during,
        duringOutageAfterFirst5s: duringAfterFirst5s,
        outageSentRate: outageLoad.sentRate,
        p99Ratio: round(during.p99Ms / normal.p99Ms),
        /** seconds of the outage (from the broker stop) with requests slower than 2 × the normal p99 */
        slowDuringOutage,
        /** pauses of the load generator's own event loop (> 40 ms) during the outage load, by second from the broker stop */
        generatorStallsDuringOutage: generatorStalls,
        /** the same during the normal load (after its warm-up), by second from the end of the warm-up */
        generatorStallsNormal,
        p99RatioTarget: 1.5,
      },
      drain: {
        normal: {
          ...normalDrain,
          drained: normalDrained,
          rounds: normalRounds.map((r) => r.stream.ratePerSec),
          roundsBySent: normalRounds.map((r) => r.steadyRatePerSec),
        },
        afterOutage: {
          ...outageDrain,
          drained,
          drainedAfterRestartSeconds: round((drainedAt - restartAt) / 1000, 1),
          firstStoredAfterSeconds: round(((outageDrain.stream.firstStoredAt ?? NaN) - restartAt) / 1000, 1),
        },
        /** the outage drain against the normal one, each timed by the broker from its first stored message to its last */
        ratio: round(outageDrain.stream.ratePerSec / normalDrain.stream.ratePerSec),
        /** the same by the rows' sent_at (first → last mark), medians apart */
        ratioBySent: round(outageDrain.steadyRatePerSec / normalBySent.steadyRatePerSec),
        /** the same backlog drained without an outage (relay restarted over it), timed by the stream */
        sameBacklog: { ...sameDrain, drained: sameDrained, insertMs: sameInsert.ms, firstRelayExit: relayExit },
        /** the outage drain against the drain of the same backlog without an outage, both timed by the stream */
        ratioSameBacklog: round(outageDrain.stream.ratePerSec / sameDrain.stream.ratePerSec),
        ratioTarget: 0.9,
      },
      relayRss: {
        pid: relayPid,
        peakMB: round(rssPeakKb / 1024, 1),
        hwmMB: relayHwmKb !== undefined ? round(relayHwmKb / 1024, 1) : null,
        beforeOutageMB: round((rssBeforeOutageKb ?? NaN) / 1024, 1),
        atRestartMB: round((rssAtRestartKb ?? NaN) / 1024, 1),
        duringDrainMaxMB: rssDuringDrain.length ? round(Math.max(...rssDuringDrain) / 1024, 1) : null,
        targetMB: 256,
        samples: rss.length,
        series: rss.filter((_, i) => i % 4 === 0).map(([t, kb]) => [since(t), round(kb / 1024, 1)]),
      },
      database: {
        autoVacuum,
        pageSize,
        beforeOutage,
        atPeakRows,
        peakSampled: { ...peakDb, atSeconds: since(peakDb.at) },
        bytesPerRow: Math.round(bytesPerRow),
        afterDrain,
        afterCompaction: { ...afterCompaction, pageCount: pagesAfter, freelistCount: freelistAfter, pageCountBefore: pagesBefore },
        afterCheckpointTruncate: afterCheckpoint,
        afterProcessesStopped: afterStop,
      },
      compaction: {
        deleted: cDone.deleted,
        batches: cDone.batches,
        pagesFreed: cDone.pagesFreed ?? 0,
        totalMs: cDone.at - cStart.at,
        deletingMs: lastBatchAt - cStart.at,
        vacuumMs: cDone.at - lastBatchAt,
        maxBatchMs: batchLines.length ? Math.max(...batchLines.map((l) => l.batchMs ?? 0)) : 0,
      },
      stream: streamInfo ?? null,
      alerts,
      scrape: { everySeconds: SCRAPE_MS / 1000, api: scrapeMs('api'), relay: scrapeMs('relay') },
      scrapes: scrapes.map((s) => ({ t: since(s.at), ...s.values, ms: s.ms })),
      timeline: {
        startedAt: new Date(started).toISOString(),
        outageStartSeconds: since(outageStart),
        restartSeconds: since(restartAt),
        drainedSeconds: since(drainedAt),
        relayRestartedSeconds: since(relayAgainStarted),
      },
      loadAverage: { atEnd: loadavg().map((n) => round(n)) },
      machine,
    };

    const show = (s: typeof normal) => `p50 ${s.p50Ms} ms, p99 ${s.p99Ms} ms, max ${s.maxMs} ms (${s.requests} requests, ${s.failed} failed)`;
    const sz = (s: DbSize) => `${s.totalMB} MB (main ${round(s.mainBytes / MB, 1)} + wal ${round(s.walBytes / MB, 1)})`;
    console.log('\n=== outage summary ===');
    console.log(`topology: ${result.topology}; load average at the end ${result.loadAverage.atEnd.join(', ')} (2 cores)`);
    console.log(`backlog: ${backlog} rows (${ROWS} at ${RATE}/s = a ${result.simulatedOutageMinutesAtRate}-minute outage), broker down ${outageSeconds} s`);
    console.log(`POST normal:          ${show(normal)}`);
    console.log(`POST during outage:   ${show(during)}`);
    console.log(`POST during, after 5 s: ${show(duringAfterFirst5s)}`);
    console.log(`POST p99 during / normal = ${result.post.p99Ratio} (target ≤ 1.5)`);
    const slowest = [...slowDuringOutage].sort((a, b) => b.maxMs - a.maxMs).slice(0, 8);
    console.log(
      `  the load generator's own event loop paused > 40 ms ${generatorStallsNormal.length} times during the normal load, ${generatorStalls.length} during the outage load${
        generatorStalls.length
          ? ` (${generatorStalls
              .slice(0, 8)
              .map((x) => `${x.second} s: ${x.ms} ms`)
              .join(', ')})`
          : ''
      }`,
    );
    console.log(
      `  during the outage, ${slowDuringOutage.reduce((n, x) => n + x.n, 0)} requests slower than 2 × the normal p99 in ${slowDuringOutage.length} of ${OUTAGE_SECONDS} s${slowest.length ? ` (slowest seconds: ${slowest.map((x) => `${x.second} s: ${x.n} up to ${x.maxMs} ms`).join(', ')})` : ''}`,
    );
    console.log(
      `relay drain, timed by the stream (first → last message stored): normal ${normalDrain.stream.ratePerSec} ev/s (median of ${NORMAL_ROUNDS} drains of ${normalDrain.rows} rows: ${result.drain.normal.rounds.join(', ')}), backlog ${outageDrain.stream.ratePerSec} ev/s (${outageDrain.stream.stored} stored); ratio ${result.drain.ratio} (target ≥ 0.9)`,
    );
    console.log(
      `  the same backlog without an outage (relay restarted over ${ROWS} pending rows): ${sameDrain.stream.ratePerSec} ev/s; outage ÷ same backlog = ${result.drain.ratioSameBacklog}${relayExit.code === 0 ? '' : ` (the first relay ended with ${relayExit.code ?? relayExit.signal}: its leases ran out instead of being released)`}`,
    );
    console.log(
      `  by the rows' sent_at (first → last mark): normal ${normalBySent.steadyRatePerSec} ev/s (${result.drain.normal.roundsBySent.join(', ')}), backlog ${outageDrain.steadyRatePerSec} ev/s; ratio ${result.drain.ratioBySent}`,
    );
    console.log(
      `  backlog: first message stored ${result.drain.afterOutage.firstStoredAfterSeconds} s after the restart, first row marked ${outageDrain.firstSentAfterSeconds} s after it, drained ${result.drain.afterOutage.drainedAfterRestartSeconds} s after it (${outageDrain.rateFromStartPerSec} ev/s from the restart)`,
    );
    console.log(
      `relay RSS: peak ${result.relayRss.peakMB} MB (VmHWM ${result.relayRss.hwmMB} MB; before outage ${result.relayRss.beforeOutageMB}, at restart ${result.relayRss.atRestartMB}, drain max ${result.relayRss.duringDrainMaxMB}) (target < 256 MB)`,
    );
    console.log(
      `database: before outage ${sz(beforeOutage)}; at peak ${sz(atPeakRows)} (sampled max ${peakDb.totalMB} MB); after drain ${sz(afterDrain)}; after compaction ${sz(afterCompaction)}; after checkpoint(TRUNCATE) ${sz(afterCheckpoint)}; after stop ${sz(afterStop)}`,
    );
    console.log(
      `  ≈ ${result.database.bytesPerRow} bytes per backlog row (file + wal growth / rows); pages ${pagesBefore} → ${pagesAfter}, freelist ${freelistAfter}`,
    );
    console.log(
      `compaction: ${cDone.deleted} rows, ${cDone.batches} batches, ${result.compaction.totalMs} ms (deleting ${result.compaction.deletingMs} ms, max batch ${result.compaction.maxBatchMs} ms; vacuum ${result.compaction.vacuumMs} ms), ${result.compaction.pagesFreed} pages freed`,
    );
    if (streamInfo) console.log(`stream after the outage drain: ${streamInfo.messages} messages, ${round(streamInfo.bytes / MB, 1)} MB`);
    for (const a of alerts) {
      const tr = a.transitions.map((t) => `${t.condition === 'no data' ? 'no data' : t.condition ? 'true' : 'false'} @ ${t.tSeconds} s`).join(', ');
      console.log(
        `alert ${a.alert}${a.cause ? ` (cause ${a.cause})` : ''}: \`${a.expr}\` for: ${a.forSeconds} s — condition ${tr}; fired @ ${a.firedAtSeconds ?? '–'} s, resolved @ ${a.resolvedAtSeconds ?? '–'} s (times from the broker stop; restart @ ${round((restartAt - outageStart) / 1000, 1)} s; ${a.scrapesWithoutTheSeries} scrapes without the series)`,
      );
    }
    console.log(`scrape times (ms, p50/p99/max): api ${Object.values(result.scrape.api).join('/')}, relay ${Object.values(result.scrape.relay).join('/')}`);
    if (normal.p50Ms > 1000) console.log(`MISS: the service did not keep up with ${RATE} POST/s with the broker up (p50 ${normal.p50Ms} ms)`);
    for (const [name, out] of [
      ['relay', relayOutput],
      ['relay (restarted)', relayAgainOutput],
    ] as const) {
      if (/error|fatal/i.test(out)) console.log(`${name} output (tail):\n${out.slice(-2000)}`);
    }
    console.log(`results: ${saveResult('outage', result)}`);
  } finally {
    clearTimeout(limit);
    await cleanup();
  }
}

await main();
