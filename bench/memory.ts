// npm run bench:memory [-- --rate 500] [--minutes 10] [--warmup 30] [--sample-seconds 5] [--quick]
// Memory over a long steady run: does the resident set of each role stay flat? Three processes on a private
// nats-server, each started as users run it, with fresh database files in a temp dir:
//   api         src/entry/node.ts, ROLES=api (commands write the order and its outbox row, then kick the relay)
//   relay       src/entry/relay.ts, its own process (reads the api's outbox: the service database is theirs to share)
//   subscriber  `npm run consume -- reporting`, its own database
// This process sends POST /orders at `--rate` (open model, bench/variants/paced-load.ts) for `--warmup` seconds and
// then `--minutes`; every order is a new aggregate (the server assigns its id), so a map keyed by aggregate, event
// id or subject that is never emptied grows with the run. Every `--sample-seconds` it reads each process's VmRSS
// (/proc/<pid>/status); the /metrics series of each process are counted before the load and after it (a label
// taking ids would add series per event). The roles expose no heap figures, so RSS is what is measured.
// Printed per role: RSS at the end of the warm-up, median of the first and of the last minute, max, and the
// least-squares slope (MB/min) of the samples after the first measured minute; JSON in bench/results/memory-*.json.
// `--quick`: 1 minute after 10 s of warm-up (the slope then covers the whole measured minute): checks the
// benchmark works, its figures say little. Bounded: the load stops on time, the drain wait after 60 s. No assertion.
import { createClient, type Client } from '@libsql/client';
import { readFileSync } from 'node:fs';
import { createTempDir } from '../test/support/db.ts';
import { orderBody } from '../test/support/example-orders.ts';
import { freePort, runtimeCommand, waitForHttp } from '../test/support/process.ts';
import { startChild, startServer, subscriberCommand, type Child } from './variants/launch.ts';
import { describeMachine } from './variants/machine.ts';
import { runPacedLoad, summarize } from './variants/paced-load.ts';
import { durableReady, numberArg, percentile, round, saveResult, serviceEnv, startNats, waitFor } from './support.ts';

const QUICK = process.argv.includes('--quick');
const RATE = numberArg('rate', 500);
const MINUTES = numberArg('minutes', QUICK ? 1 : 10);
const WARMUP_S = numberArg('warmup', QUICK ? 10 : 30);
const SAMPLE_MS = numberArg('sample-seconds', 5) * 1000;
const DRAIN_MS = 60_000;
const SUBSCRIBER = 'reporting';

type Role = { name: string; child: Child; url: string };
/** Process groups started, for the outer time limit. */
const spawned: number[] = [];
type Sample = { tMs: number; rssMb: number };

/** VmRSS of `pid` in MB (/proc, Linux); undefined when it cannot be read. */
function rssMbOf(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** Series per metric family in a process's /metrics (sample lines, comments left out), with their total. */
async function seriesOf(url: string): Promise<{ total: number; byFamily: Record<string, number> } | undefined> {
  try {
    const text = await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
    const byFamily: Record<string, number> = {};
    let total = 0;
    for (const line of text.split('\n')) {
      if (line === '' || line.startsWith('#')) continue;
      const name = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line)?.[0] ?? line;
      const family = name.replace(/_(bucket|sum|count)$/, '');
      byFamily[family] = (byFamily[family] ?? 0) + 1;
      total++;
    }
    return { total, byFamily };
  } catch {
    return undefined;
  }
}

/** A role without the api: serves /health and /metrics on METRICS_PORT; resolves once /health answers. */
async function startWithMetricsPort(name: string, cmd: string, args: string[], env: Record<string, string>): Promise<Role> {
  const port = await freePort();
  const child = startChild(name, cmd, args, { HOST: '127.0.0.1', LOG_LEVEL: 'warn', ...env, METRICS_PORT: String(port) });
  const url = `http://127.0.0.1:${port}`;
  try {
    await Promise.race([
      waitForHttp(`${url}/health`, { timeoutMs: 60_000 }),
      child.exited.then((code) => {
        throw new Error(`exited with ${code}`);
      }),
    ]);
  } catch (error) {
    await child.stop();
    throw new Error(`${name} did not start: ${String(error)}\n${child.output()}`);
  }
  return { name, child, url };
}

/** Least-squares slope of y over x. */
function slope(points: Array<[number, number]>): number {
  const n = points.length;
  if (n < 2) return NaN;
  const mx = points.reduce((s, [x]) => s + x, 0) / n;
  const my = points.reduce((s, [, y]) => s + y, 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den === 0 ? NaN : num / den;
}

async function count(client: Client, sql: string): Promise<number> {
  try {
    return Number((await client.execute(sql)).rows[0]![0]);
  } catch {
    return 0; // tables not there yet
  }
}

async function main() {
  const nats = await startNats();
  const tmp = createTempDir('hono-outbox-memory-');
  const roles: Role[] = [];
  const env = serviceEnv(nats.url, tmp.dir, SUBSCRIBER);
  const samples = new Map<string, Sample[]>();
  let sampler: ReturnType<typeof setInterval> | undefined;
  try {
    const api = await startServer('api', 'node', 'src/entry/node.ts', { ...env, ROLES: 'api' });
    roles.push({ name: 'api', child: api, url: api.url });
    const relay = runtimeCommand('node', 'src/entry/relay.ts');
    roles.push(await startWithMetricsPort('relay', relay.cmd, relay.args, env));
    const sub = subscriberCommand(SUBSCRIBER);
    roles.push(await startWithMetricsPort('subscriber', sub.cmd, sub.args, env));
    for (const r of roles) if (r.child.proc.pid !== undefined) spawned.push(r.child.proc.pid);

    // the durable consumer exists once the subscriber is up; only then does the load start
    const ready = await durableReady(nats.url, SUBSCRIBER);
    if (!ready) throw new Error(`the ${SUBSCRIBER} consumer never appeared; output:\n${roles.map((r) => `[${r.name}] ${r.child.output()}`).join('\n')}`);

    const seriesBefore = Object.fromEntries(await Promise.all(roles.map(async (r) => [r.name, await seriesOf(r.url)] as const)));
    console.log(
      `memory: ${RATE} POST /orders/s for ${WARMUP_S} s warm-up + ${MINUTES} min; RSS of api, relay and subscriber every ${SAMPLE_MS / 1000} s${QUICK ? ' (quick: figures say little)' : ''}`,
    );
    for (const r of roles) samples.set(r.name, []);
    const t0 = Date.now();
    const sample = () => {
      const t = Date.now() - t0;
      for (const r of roles) {
        const rss = rssMbOf(r.child.proc.pid);
        if (rss !== undefined) samples.get(r.name)!.push({ tMs: t, rssMb: round(rss, 1) });
      }
    };
    sample();
    sampler = setInterval(sample, SAMPLE_MS);
    const warmupMs = WARMUP_S * 1000;
    const loadMs = warmupMs + MINUTES * 60_000;
    const progress = setInterval(() => {
      const t = Date.now() - t0;
      if (t > loadMs) return;
      const now = roles.map((r) => `${r.name} ${samples.get(r.name)!.at(-1)?.rssMb ?? '?'} MB`).join(', ');
      console.log(`  ${Math.round(t / 1000)} s: ${now}`);
    }, 60_000);
    // series once the load's routes and outcomes exist: what grows after this point grows with the run
    let seriesAtWarmupEnd: Promise<Record<string, Awaited<ReturnType<typeof seriesOf>>>> | undefined;
    const warmupScrape = setTimeout(() => {
      seriesAtWarmupEnd = Promise.all(roles.map(async (r) => [r.name, await seriesOf(r.url)] as const)).then(Object.fromEntries);
    }, warmupMs);
    const load = await runPacedLoad({ url: `${api.url}/orders`, body: JSON.stringify(orderBody()), rate: RATE, maxMs: loadMs });
    clearInterval(progress);
    clearTimeout(warmupScrape);
    const seriesWarm = (await seriesAtWarmupEnd) ?? {};
    const loadEndMs = Date.now() - t0;

    const app = createClient({ url: env.DATABASE_URL });
    const subDb = createClient({ url: env.CONSUMER_DATABASE_URL_TEMPLATE.replace('{name}', SUBSCRIBER) });
    const drained = await waitFor(async () => {
      const pending = await count(app, "SELECT count(*) FROM outbox WHERE status = 'pending'");
      const events = await count(app, 'SELECT count(*) FROM outbox');
      const applied = await count(subDb, `SELECT count(*) FROM inbox WHERE consumer = '${SUBSCRIBER}'`);
      return pending === 0 && applied >= events;
    }, DRAIN_MS);
    const events = await count(app, 'SELECT count(*) FROM outbox');
    const pending = await count(app, "SELECT count(*) FROM outbox WHERE status = 'pending'");
    const applied = await count(subDb, `SELECT count(*) FROM inbox WHERE consumer = '${SUBSCRIBER}'`);
    app.close();
    subDb.close();
    const seriesAfter = Object.fromEntries(await Promise.all(roles.map(async (r) => [r.name, await seriesOf(r.url)] as const)));
    clearInterval(sampler);
    sampler = undefined;

    const firstMinuteEnd = warmupMs + Math.min(60_000, (loadMs - warmupMs) / 2);
    const slopeFrom = MINUTES > 1 ? warmupMs + 60_000 : warmupMs;
    const perRole = roles.map((r) => {
      const all = samples.get(r.name)!;
      const inLoad = all.filter((s) => s.tMs <= loadMs);
      const atWarmupEnd = inLoad.filter((s) => s.tMs <= warmupMs).at(-1)?.rssMb ?? NaN;
      const median = (xs: Sample[]) =>
        round(
          percentile(
            xs.map((s) => s.rssMb),
            50,
          ),
          1,
        );
      const firstMinute = inLoad.filter((s) => s.tMs > warmupMs && s.tMs <= firstMinuteEnd);
      const lastMinute = inLoad.filter((s) => s.tMs >= Math.max(loadMs - 60_000, firstMinuteEnd));
      const trend = inLoad.filter((s) => s.tMs >= slopeFrom).map((s) => [s.tMs / 60_000, s.rssMb] as [number, number]);
      const before = seriesWarm[r.name] ?? seriesBefore[r.name];
      const after = seriesAfter[r.name];
      const grown = Object.fromEntries(
        Object.entries(after?.byFamily ?? {})
          .filter(([f, n]) => n !== (before?.byFamily[f] ?? 0))
          .map(([f, n]) => [f, { before: before?.byFamily[f] ?? 0, after: n }]),
      );
      return {
        role: r.name,
        pid: r.child.proc.pid,
        rssAtWarmupEndMb: atWarmupEnd,
        rssFirstMinuteMedianMb: median(firstMinute),
        rssLastMinuteMedianMb: median(lastMinute),
        rssMaxMb: round(Math.max(...inLoad.map((s) => s.rssMb)), 1),
        slopeMbPerMin: round(slope(trend), 3),
        slopeOverMinutes: round((loadMs - slopeFrom) / 60_000, 2),
        slopeSamples: trend.length,
        metricsSeriesBeforeLoad: seriesBefore[r.name]?.total ?? NaN,
        metricsSeriesAtWarmupEnd: seriesWarm[r.name]?.total ?? NaN,
        metricsSeriesAfter: after?.total ?? NaN,
        metricsFamiliesChanged: grown,
        samples: all,
      };
    });
    const result = {
      bench: 'memory',
      quick: QUICK,
      rate: RATE,
      minutes: MINUTES,
      warmupSeconds: WARMUP_S,
      sampleSeconds: SAMPLE_MS / 1000,
      topology: 'api (src/entry/node.ts, ROLES=api) + relay (src/entry/relay.ts) + subscriber (npm run consume -- reporting), each its own process',
      sentRate: load.sentRate,
      http: summarize(load.samples, percentile),
      loadEndSeconds: round(loadEndMs / 1000, 1),
      events,
      pendingAtEnd: pending,
      applied,
      drained,
      roles: perRole,
      machine: await describeMachine(),
    };
    console.log(
      `sent ${result.sentRate} POST/s: p50 ${result.http.p50Ms} ms, p99 ${result.http.p99Ms} ms, ${result.http.failed} failed of ${result.http.requests}${Object.keys(result.http.transportErrors).length > 0 ? ` (transport errors: ${JSON.stringify(result.http.transportErrors)})` : ''}; ${events} events, ${applied} applied${drained ? '' : ' (NOT drained within 60 s)'}`,
    );
    console.log(
      'role        RSS MB: end of warm-up | 1st min median | last min median | max | slope MB/min (after 1st min) | /metrics series: before load → end of warm-up → end',
    );
    for (const r of perRole) {
      console.log(
        `${r.role.padEnd(11)} ${String(r.rssAtWarmupEndMb).padStart(8)} | ${String(r.rssFirstMinuteMedianMb).padStart(14)} | ${String(r.rssLastMinuteMedianMb).padStart(15)} | ${String(r.rssMaxMb).padStart(6)} | ${String(r.slopeMbPerMin).padStart(8)} over ${r.slopeOverMinutes} min (${r.slopeSamples} samples) | ${r.metricsSeriesBeforeLoad} → ${r.metricsSeriesAtWarmupEnd} → ${r.metricsSeriesAfter}`,
      );
      for (const [f, c] of Object.entries(r.metricsFamiliesChanged)) console.log(`            series of ${f} after the warm-up: ${c.before} → ${c.after}`);
    }
    if (!drained) {
      console.log(`MISS: not drained 60 s after the load: ${pending} outbox rows pending, ${events - applied} events not applied; last output of each role:`);
      for (const r of roles) console.log(`[${r.name}] ${r.child.output().slice(-1500)}`);
    }
    if (result.http.p50Ms > 1000)
      console.log(`MISS: the api did not keep up with ${RATE} POST/s (p50 ${result.http.p50Ms} ms): the figures are not at that rate`);
    console.log(`results: ${saveResult('memory', result)}`);
  } finally {
    if (sampler) clearInterval(sampler);
    for (const r of roles.reverse()) await r.child.stop();
    tmp[Symbol.dispose]();
    await nats[Symbol.asyncDispose]();
  }
}

// An outer bound, whatever hangs: the load, the drain wait, a child that does not stop.
const limit = setTimeout(
  () => {
    console.error('bench:memory: outer time limit reached; stopping');
    for (const pid of spawned) {
      try {
        process.kill(-pid, 'SIGKILL'); // each child leads its own process group
      } catch {
        // gone
      }
    }
    process.exit(1);
  },
  (WARMUP_S + MINUTES * 60 + 300) * 1000,
);
limit.unref();
await main();
