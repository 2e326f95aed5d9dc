// npm run bench:lag [-- --rate 1000] [--seconds 30] [--warmup 2] [--runtime node] [--subscriber process|inline]
// End-to-end lag at a steady command rate, across real processes on a private nats-server:
//   load (this process, open model) ──HTTP──▶ service (ROLES=api,relay: the default dev topology, relay woken
//   in-process by each commit) ──JetStream──▶ `reporting` subscriber with its inbox (its own process by default,
//   as `npm run consume -- reporting` runs it; `--subscriber inline` runs ROLES=api,relay,consumers instead).
// Measured three ways, all from occurred_at (taken inside the command's transaction, just before its commit, so
// every figure includes the commit itself; one machine clock, ms):
//   commit → PubAck     the service's outbox_publish_lag_seconds histogram, scraped at the end (it covers the warm-up
//                       too: a scrape in between is answered late by a busy server); bucket bounds only, so its
//                       percentiles read "≤ bound"
//   commit → sent_at    outbox.sent_at − occurred_at per row: the PubAck plus the wait for the rest of the batch's
//                       PubAcks and for the relay's UPDATE to reach the write queue
//   commit → stream     the stream's own store time of each message (read back after the run) − its Occurred-At
//                       header: when the event was seen on the stream, whatever the relay did after the PubAck
//   commit → applied    inbox.received_at − occurred_at per event (joined on the event id)
// `--rates 500,1000,1500` runs the whole measurement once per rate (a fresh service each) and prints the highest rate
// whose commit → stream p99 stays within 50 ms.
// Bounded: the load stops after warmup + seconds, the drain wait after 60 s. No assertion on timings.
import { createClient, type Client } from '@libsql/client';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { createTempDir } from '../test/support/db.ts';
import { orderBody } from '../test/support/example-orders.ts';
import type { Runtime } from '../test/support/process.ts';
import { startChild, startServer, stringArg, subscriberCommand, type Child } from './variants/launch.ts';
import { describeMachine } from './variants/machine.ts';
import { runPacedLoad, summarize } from './variants/paced-load.ts';
import { durableReady, numberArg, percentile, round, saveResult, serviceEnv, startNats, waitFor } from './support.ts';

const RATES = stringArg('rates', String(numberArg('rate', 1000)))
  .split(',')
  .map((r) => Number(r.trim()));
if (RATES.some((r) => !(r > 0 && r <= 20_000))) throw new Error(`--rate/--rates take commands per second from 1 to 20000 (got ${RATES})`);
const SECONDS = numberArg('seconds', 30);
const WARMUP = numberArg('warmup', 2);
const DRAIN_MS = numberArg('drain-seconds', 60) * 1000;
const RUNTIME = stringArg('runtime', 'node') as Runtime;
const SUBSCRIBER_MODE = stringArg('subscriber', 'process');
if (SUBSCRIBER_MODE !== 'process' && SUBSCRIBER_MODE !== 'inline') throw new Error('--subscriber must be process or inline');
const SUBSCRIBER = 'reporting';
const CDF_POINTS = [...Array.from({ length: 100 }, (_, i) => i), 99.5, 99.9, 100];

/** p50/p99/max and a CDF (percentile → ms) of `values`. */
function distribution(values: number[]) {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (p: number) => percentile(sorted, p);
  return {
    samples: values.length,
    p50Ms: round(at(50)),
    p99Ms: round(at(99)),
    maxMs: sorted.length ? round(sorted[sorted.length - 1]!) : NaN,
    cdf: sorted.length ? CDF_POINTS.map((p) => [p, round(at(p))] as [number, number]) : [],
  };
}

type Buckets = Array<[leMs: number, count: number]>;

/** The cumulative buckets of outbox_publish_lag_seconds in the service's /metrics, le in ms. */
async function scrapeLagBuckets(url: string): Promise<Buckets> {
  try {
    const text = await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
    return [...text.matchAll(/^outbox_publish_lag_seconds_bucket\{le="([^"]+)"\} (\d+)$/gm)].map((m) => [
      m[1] === '+Inf' ? Infinity : Number(m[1]) * 1000,
      Number(m[2]),
    ]);
  } catch {
    return [];
  }
}

/** A cumulative histogram as a CDF at the bucket bounds, with bucket-bound percentiles. */
function bucketDistribution(buckets: Buckets) {
  const total = buckets.at(-1)?.[1] ?? 0;
  const bound = (p: number) => buckets.find(([, n]) => n >= (p / 100) * total)?.[0] ?? NaN;
  return {
    samples: total,
    p50AtMostMs: bound(50),
    p99AtMostMs: bound(99),
    maxAtMostMs: bound(100),
    cdf: total ? buckets.filter(([le]) => Number.isFinite(le)).map(([le, n]) => [le, round((100 * n) / total)] as [number, number]) : [],
  };
}

async function count(client: Client, sql: string): Promise<number> {
  try {
    return Number((await client.execute(sql)).rows[0]![0]);
  } catch {
    return 0; // the subscriber has not created its tables yet
  }
}

/** Store time − Occurred-At (ms) of every message in the stream that occurred at or after `fromMs`, read with an ordered consumer. */
async function streamLags(url: string, stream: string, fromMs: number): Promise<number[]> {
  const nc = await connect({ servers: [url] });
  try {
    const js = jetstream(nc);
    const total = (await (await jetstreamManager(nc)).streams.info(stream)).state.messages;
    const consumer = await js.consumers.get(stream);
    const lags: number[] = [];
    let seen = 0;
    while (seen < total) {
      const batch = await consumer.fetch({ max_messages: Math.min(1000, total - seen), expires: 5000 });
      let got = 0;
      for await (const m of batch) {
        got++;
        const occurred = Date.parse(m.headers?.get('Occurred-At') ?? '');
        if (occurred >= fromMs) lags.push(m.info.timestampNanos / 1e6 - occurred);
      }
      if (got === 0) break;
      seen += got;
    }
    return lags;
  } finally {
    await nc.close();
  }
}

async function main(RATE: number) {
  const nats = await startNats();
  const tmp = createTempDir('hono-outbox-lag-');
  const children: Child[] = [];
  const env = serviceEnv(nats.url, tmp.dir, SUBSCRIBER);
  let subscriberHow = 'inline: ROLES=api,relay,consumers';
  try {
    const service = await startServer('service', RUNTIME, `src/entry/${RUNTIME}.ts`, {
      ...env,
      ROLES: SUBSCRIBER_MODE === 'inline' ? 'api,relay,consumers' : 'api,relay',
    });
    children.push(service);
    if (SUBSCRIBER_MODE === 'process') {
      const sub = subscriberCommand(SUBSCRIBER);
      subscriberHow = sub.how;
      children.push(startChild('subscriber', sub.cmd, sub.args, env));
    }
    // the durable consumer exists once the subscriber is up; only then does the clock start
    const ready = await durableReady(nats.url, SUBSCRIBER);
    if (!ready)
      throw new Error(`the ${SUBSCRIBER} consumer never appeared (${subscriberHow}); output:\n${children.map((c) => `[${c.name}] ${c.output()}`).join('\n')}`);

    console.log(`lag: ${RATE} commands/s for ${WARMUP} s warm-up + ${SECONDS} s to the ${RUNTIME} service; subscriber ${subscriberHow}`);
    const loadStart = Date.now();
    const load = await runPacedLoad({ url: `${service.url}/orders`, body: JSON.stringify(orderBody()), rate: RATE, maxMs: (WARMUP + SECONDS) * 1000 });
    const loadEnd = Date.now();
    const samples = load.samples;
    const measureFrom = loadStart + WARMUP * 1000;

    const app = createClient({ url: env.DATABASE_URL });
    const sub = createClient({ url: env.CONSUMER_DATABASE_URL_TEMPLATE.replace('{name}', SUBSCRIBER) });
    const drained = await waitFor(async () => {
      const pending = await count(app, "SELECT count(*) FROM outbox WHERE status = 'pending'");
      const events = await count(app, 'SELECT count(*) FROM outbox');
      const applied = await count(sub, `SELECT count(*) FROM inbox WHERE consumer = '${SUBSCRIBER}'`);
      return pending === 0 && applied >= events;
    }, DRAIN_MS);
    const drainMs = Date.now() - loadEnd;
    const pubAckHistogram = bucketDistribution(await scrapeLagBuckets(service.url));
    const toStream = await streamLags(nats.url, 'HONO_OUTBOX', measureFrom);
    for (const c of children.splice(0).reverse()) await c.stop();

    const rows = (await app.execute({ sql: 'SELECT id, occurred_at, sent_at FROM outbox WHERE occurred_at >= ?', args: [measureFrom] })).rows;
    const received = new Map<string, number>();
    for (const r of (await sub.execute({ sql: 'SELECT event_id, received_at FROM inbox WHERE consumer = ?', args: [SUBSCRIBER] }).catch(() => ({ rows: [] })))
      .rows) {
      received.set(String(r.event_id), Number(r.received_at));
    }
    app.close();
    sub.close();
    const pubAck: number[] = [];
    const applied: number[] = [];
    for (const r of rows) {
      const occurred = Number(r.occurred_at);
      if (r.sent_at !== null) pubAck.push(Number(r.sent_at) - occurred);
      const at = received.get(String(r.id));
      if (at !== undefined) applied.push(at - occurred);
    }
    const measured = samples.filter((s) => s.dueAt >= measureFrom);
    const result = {
      bench: 'lag',
      runtime: RUNTIME,
      topology: SUBSCRIBER_MODE === 'inline' ? 'one process: ROLES=api,relay,consumers' : 'ROLES=api,relay + subscriber process',
      subscriber: subscriberHow,
      rate: RATE,
      seconds: SECONDS,
      warmupSeconds: WARMUP,
      sentRate: load.sentRate,
      answeredWithinMs: load.totalMs,
      drained,
      drainMs,
      events: rows.length,
      notPublished: rows.length - pubAck.length,
      notApplied: rows.length - applied.length,
      http: summarize(measured, percentile),
      commitToPubAck: pubAckHistogram,
      commitToStream: distribution(toStream),
      commitToSentAt: distribution(pubAck),
      commitToApplied: distribution(applied),
      machine: await describeMachine(),
    };
    const line = (name: string, d: ReturnType<typeof distribution>) => `${name}: p50 ${d.p50Ms} ms, p99 ${d.p99Ms} ms, max ${d.maxMs} ms (${d.samples} events)`;
    console.log(
      `sent ${result.sentRate} commands/s, last answer after ${(load.totalMs / 1000).toFixed(1)} s; POST p50 ${result.http.p50Ms} ms, p99 ${result.http.p99Ms} ms, ${result.http.failed} failed of ${result.http.requests}${Object.keys(result.http.transportErrors).length > 0 ? ` (transport errors: ${JSON.stringify(result.http.transportErrors)})` : ''}`,
    );
    const h = result.commitToPubAck;
    console.log(`commit → PubAck  (histogram): p50 ≤ ${h.p50AtMostMs} ms, p99 ≤ ${h.p99AtMostMs} ms, max ≤ ${h.maxAtMostMs} ms (${h.samples} events)`);
    console.log(line('commit → stream  ', result.commitToStream));
    console.log(line('commit → sent_at', result.commitToSentAt));
    console.log(line('commit → applied', result.commitToApplied));
    if (result.http.p50Ms > 1000)
      console.log(`MISS: the service did not keep up with ${RATE} commands/s (POST p50 ${result.http.p50Ms} ms; requests queued in the client)`);
    if (!drained)
      console.log(`MISS: not drained ${Math.round(DRAIN_MS / 1000)} s after the load: ${result.notPublished} unpublished, ${result.notApplied} not applied`);
    return result;
  } finally {
    for (const c of children.reverse()) await c.stop();
    tmp[Symbol.dispose]();
    await nats[Symbol.asyncDispose]();
  }
}

const runs = [];
for (const rate of RATES) runs.push(await main(rate));
if (runs.length > 1) {
  console.log('\nrate /s | sent /s | POST p99 ms | commit → stream p50 / p99 / max ms | commit → applied p99 ms');
  for (const r of runs)
    console.log(
      `${String(r.rate).padStart(7)} | ${String(r.sentRate).padStart(7)} | ${String(r.http.p99Ms).padStart(11)} | ${`${r.commitToStream.p50Ms} / ${r.commitToStream.p99Ms} / ${r.commitToStream.maxMs}`.padStart(34)} | ${r.commitToApplied.p99Ms}`,
    );
  const within = runs.filter((r) => r.drained && r.commitToStream.p99Ms <= 50).map((r) => r.rate);
  console.log(
    `highest rate with commit → stream p99 ≤ 50 ms: ${within.length ? Math.max(...within) : 'none of'} ${within.length ? 'commands/s' : RATES.join(', ')}`,
  );
}
console.log(`results: ${saveResult('lag', runs.length === 1 ? runs[0] : { bench: 'lag', sweep: runs })}`);
