// npm run bench:commands [-- --runtime node|bun|deno|all] [--connections 32] [--seconds 10] [--warmup 2] [--variants a,b,c,d,e[,f]]
//   [--client wrk|autocannon]
// POST /orders throughput and latency against five servers, each its own child process on a free loopback port, one
// after the other, same runtime per row, loaded by wrk (a C client on one thread, as an external load test; the
// default) or by autocannon in this Node process (`--client autocannon`: it then shares the cores with the server):
//   (a) ceiling     Hono + the same zod validation, answers without I/O (the HTTP ceiling)
//   (b) state-only  the real app and writer, the order rows only (no appendToOutbox)
//   (c) outbox      the real service entry, ROLES=api: state + outbox rows in one transaction
//   (d) dual-write  (b) then an awaited JetStream publish before answering, to a private nats-server
//   (e) mixed       (c) with one request in ten a cancel of an already cancelled order (409, an expected refusal)
//   (f) an experiment, only with `--variants …,f`: the app's middleware and validation on the event loop, the order
//       and its outbox row written on a worker thread (bench/variants/worker-writer.ts); optimistic, since its
//       worker runs neither the idempotency step nor the command route's span and logger
// Every server gets a fresh database. Every answer is counted by status: a run with an unexpected status or a socket
// error says so (and counts only the expected answers). Prints req/s (for (e): answered commands, 201 and 409, per
// second) and p50/p99 and the ratios c/b, c/d, c/a, e/c. No assertion on timings.
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { createTempDir } from '../test/support/db.ts';
import { orderBody } from '../test/support/example-orders.ts';
import { RUNTIMES, type Runtime } from '../test/support/process.ts';
import { startServer, stringArg } from './variants/launch.ts';
import { checkAnswers, runWrk, WRK_BIN, type WrkRequest } from './variants/wrk.ts';
import { describeMachine } from './variants/machine.ts';
import { numberArg, round, saveResult, startNats } from './support.ts';

const CONNECTIONS = numberArg('connections', 32);
const SECONDS = numberArg('seconds', 10);
const WARMUP = numberArg('warmup', 2);
const runtimeArg = stringArg('runtime', 'all');
const CLIENT = stringArg('client', 'wrk');
if (process.argv.includes('--help')) {
  console.log(
    'npm run bench:commands [-- --runtime node|bun|deno|all] [--connections 32] [--seconds 10] [--warmup 2] [--variants a,b,c,d,e[,f]] [--client wrk|autocannon]',
  );
  console.log('  (a) ceiling, (b) state-only, (c) outbox: the real path, (d) dual-write, (e) mixed: (c) with 10 % cancels answered 409');
  process.exit(0);
}
if (CLIENT !== 'wrk' && CLIENT !== 'autocannon') throw new Error(`--client must be wrk or autocannon (got ${CLIENT})`);
const runtimes: Runtime[] = runtimeArg === 'all' ? [...RUNTIMES] : (runtimeArg.split(',') as Runtime[]);
for (const r of runtimes) if (!RUNTIMES.includes(r)) throw new Error(`--runtime must be node, bun, deno or all (got ${r})`);

type AutocannonResult = {
  '2xx': number;
  non2xx: number;
  errors: number;
  timeouts: number;
  duration: number;
  latency: { p50: number; p99: number; average: number; max: number };
  statusCodeStats?: Record<string, { count: number }>;
};
type AutocannonRequest = { method: 'POST'; path: string; headers: Record<string, string>; body: string };
type Autocannon = (o: { url: string; requests: AutocannonRequest[]; connections: number; duration: number; pipelining: number }) => Promise<AutocannonResult>;
const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon;

/** What the load sends: only placements, or nine placements then a cancel of an order already cancelled (409). */
type Load = 'place' | 'mixed';
type Variant = { key: 'a' | 'b' | 'c' | 'd' | 'e' | 'f'; id: string; label: string; entry: (r: Runtime) => string; env: Record<string, string>; load?: Load };
const VARIANT_SERVER = 'bench/variants/serve.ts';
const VARIANTS: Variant[] = [
  { key: 'a', id: 'ceiling', label: 'Hono + zod, no I/O (HTTP ceiling)', entry: () => VARIANT_SERVER, env: { VARIANT: 'ceiling' } },
  { key: 'b', id: 'stateOnly', label: 'order rows only, no outbox', entry: () => VARIANT_SERVER, env: { VARIANT: 'state-only' } },
  { key: 'c', id: 'outbox', label: 'real path: state + outbox, one tx', entry: (r) => `src/entry/${r}.ts`, env: { ROLES: 'api' } },
  { key: 'd', id: 'dualWrite', label: 'dual write: state, then awaited publish', entry: () => VARIANT_SERVER, env: { VARIANT: 'dual-write' } },
  { key: 'e', id: 'mixed', label: 'real path, 10 % cancels answered 409', entry: (r) => `src/entry/${r}.ts`, env: { ROLES: 'api' }, load: 'mixed' },
  {
    key: 'f',
    id: 'workerWriter',
    label: 'experiment: (c) with the database work on a worker thread',
    entry: () => VARIANT_SERVER,
    env: { VARIANT: 'worker-writer' },
  },
];
const variantsArg = stringArg('variants', 'a,b,c,d,e').split(',');
const selected = VARIANTS.filter((v) => variantsArg.includes(v.key));

type VariantResult =
  | {
      reqPerSec: number;
      p50Ms: number;
      p99Ms: number;
      avgMs: number;
      maxMs: number;
      ok: number;
      non2xx: number;
      errors: number;
      timeouts: number;
      /** What went wrong in the measured run (unexpected statuses, socket errors); empty when every answer was expected. */
      problems?: string[];
    }
  | { error: string };

const body = JSON.stringify(orderBody());
const JSON_TYPE = { 'content-type': 'application/json' };
const placeRequest: AutocannonRequest = { method: 'POST', path: '/orders', headers: JSON_TYPE, body };
/** The requests each connection cycles through; `cancelledId` is an order already cancelled, so its cancel is a 409. */
const requestsFor = (kind: Load, cancelledId: string): AutocannonRequest[] =>
  kind === 'place'
    ? [placeRequest]
    : [...Array<AutocannonRequest>(9).fill(placeRequest), { method: 'POST', path: `/orders/${cancelledId}/cancel`, headers: JSON_TYPE, body: '{}' }];
const load = (url: string, seconds: number, requests: AutocannonRequest[]) =>
  autocannon({ url, requests, connections: CONNECTIONS, duration: seconds, pipelining: 1 });

/** The measured run with wrk: 201 (and, for the mixed load, 409) are the expected answers; anything else is reported. */
async function loadWithWrk(url: string, kind: Load, requests: AutocannonRequest[]): Promise<VariantResult> {
  const wrkRequests: WrkRequest[] = requests.map((r) => ({ method: r.method, path: r.path, headers: r.headers, body: r.body }));
  if (WARMUP > 0) await runWrk(url, wrkRequests, { connections: CONNECTIONS, seconds: WARMUP });
  const r = await runWrk(url, wrkRequests, { connections: CONNECTIONS, seconds: SECONDS });
  const { ok, problems } = checkAnswers(r, kind === 'mixed' ? [201, 409] : [201]);
  const e = r.socketErrors;
  return {
    reqPerSec: Math.round(ok / r.seconds),
    p50Ms: r.latencyMs.p50,
    p99Ms: r.latencyMs.p99,
    avgMs: r.latencyMs.avg,
    maxMs: r.latencyMs.max,
    ok,
    non2xx: r.requests - ok,
    errors: e.connect + e.read + e.write,
    timeouts: e.timeout,
    problems,
  };
}

/** Places an order and cancels it: the target of the mixed load's cancels. */
async function cancelledOrder(url: string): Promise<string> {
  const placed = await fetch(`${url}/orders`, { method: 'POST', headers: JSON_TYPE, body });
  const { orderId } = (await placed.json()) as { orderId: string };
  const cancelled = await fetch(`${url}/orders/${orderId}/cancel`, { method: 'POST', headers: JSON_TYPE, body: '{}' });
  if (cancelled.status !== 200) throw new Error(`cancel answered ${cancelled.status}`);
  await cancelled.body?.cancel();
  return orderId;
}

async function measure(runtime: Runtime, v: Variant, natsUrl: string, dir: string): Promise<VariantResult> {
  const env = {
    ...v.env,
    DATABASE_URL: `file:${join(dir, `${runtime}-${v.id}.db`)}`,
    NATS_URL: natsUrl,
    NATS_STREAM: `BENCH_${runtime.toUpperCase()}`,
    EVENTS_SUBJECT_PREFIX: `bench_${runtime}`,
  };
  let server;
  try {
    server = await startServer(`${v.id}`, runtime, v.entry(runtime), env);
  } catch (error) {
    return { error: String(error).replace(/\s+/g, ' ').slice(0, 600) };
  }
  try {
    const probe = await fetch(`${server.url}/orders`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    if (probe.status !== 201) return { error: `probe POST /orders answered ${probe.status}: ${(await probe.text()).slice(0, 200)}` };
    await probe.body?.cancel();
    const requests = requestsFor(v.load ?? 'place', v.load === 'mixed' ? await cancelledOrder(server.url) : '');
    if (CLIENT === 'wrk') return await loadWithWrk(server.url, v.load ?? 'place', requests);
    if (WARMUP > 0) await load(server.url, WARMUP, requests);
    const r = await load(server.url, SECONDS, requests);
    // The mixed load's 409s are answers it asked for: they count as done, not as errors.
    const refused = v.load === 'mixed' ? (r.statusCodeStats?.['409']?.count ?? 0) : 0;
    return {
      reqPerSec: Math.round((r['2xx'] + refused) / r.duration),
      p50Ms: r.latency.p50,
      p99Ms: r.latency.p99,
      avgMs: round(r.latency.average),
      maxMs: r.latency.max,
      ok: r['2xx'] + refused,
      non2xx: r.non2xx - refused,
      errors: r.errors,
      timeouts: r.timeouts,
    };
  } finally {
    await server.stop();
  }
}

const rate = (x: VariantResult | undefined) => (x && 'reqPerSec' in x ? x.reqPerSec : NaN);
const ratio = (a: VariantResult | undefined, b: VariantResult | undefined) => round(rate(a) / rate(b));

async function main() {
  const nats = await startNats();
  const tmp = createTempDir('hono-outbox-bench-');
  const byRuntime: Record<
    string,
    { variants: Record<string, VariantResult>; ratios: { cOverB: number; cOverD: number; cOverA: number; eOverC: number; fOverA: number; fOverC: number } }
  > = {};
  try {
    for (const runtime of runtimes) {
      const variants: Record<string, VariantResult> = {};
      for (const v of selected) {
        process.stdout.write(`${runtime} (${v.key}) ${v.id} … `);
        const r = await measure(runtime, v, nats.url, tmp.dir);
        variants[v.id] = r;
        console.log(
          'error' in r
            ? `ERROR ${r.error}`
            : `${r.reqPerSec} req/s, p50 ${r.p50Ms} ms, p99 ${r.p99Ms} ms${r.non2xx + r.errors + r.timeouts ? `, WITH ERRORS: ${r.problems?.join(', ') ?? `${r.non2xx} non-2xx, ${r.errors} errors, ${r.timeouts} timeouts`}` : ''}`,
        );
      }
      const [a, b, c, d, e, f] = VARIANTS.map((v) => variants[v.id]);
      byRuntime[runtime] = {
        variants,
        ratios: { cOverB: ratio(c, b), cOverD: ratio(c, d), cOverA: ratio(c, a), eOverC: ratio(e, c), fOverA: ratio(f, a), fOverC: ratio(f, c) },
      };
    }
  } finally {
    tmp[Symbol.dispose]();
    await nats[Symbol.asyncDispose]();
  }

  const withF = selected.some((v) => v.key === 'f');
  console.log(
    `\nPOST /orders, ${CONNECTIONS} connections, ${SECONDS} s measured after ${WARMUP} s warm-up (${CLIENT === 'wrk' ? `wrk, one thread (${WRK_BIN})` : 'autocannon in the bench process'}, server in a child)`,
  );
  console.log(`${'runtime'.padEnd(8)}${selected.map((v) => `(${v.key}) ${v.id}`.padEnd(26)).join('')}c/b    c/d    c/a    e/c${withF ? '    f/a    f/c' : ''}`);
  for (const [runtime, row] of Object.entries(byRuntime)) {
    const cells = selected.map((v) => {
      const r = row.variants[v.id];
      return (r && 'reqPerSec' in r ? `${r.reqPerSec}/s ${r.p50Ms}|${r.p99Ms} ms${r.non2xx + r.errors + r.timeouts ? ' ERR' : ''}` : 'error').padEnd(26);
    });
    console.log(
      `${runtime.padEnd(8)}${cells.join('')}${String(row.ratios.cOverB).padEnd(7)}${String(row.ratios.cOverD).padEnd(7)}${String(row.ratios.cOverA).padEnd(7)}${String(row.ratios.eOverC).padEnd(7)}${withF ? `${String(row.ratios.fOverA).padEnd(7)}${row.ratios.fOverC}` : ''}`,
    );
  }
  const result = {
    bench: 'commands',
    client: CLIENT,
    connections: CONNECTIONS,
    seconds: SECONDS,
    warmupSeconds: WARMUP,
    variants: selected.map(({ key, id, label }) => ({ key, id, label })),
    runtimes: byRuntime,
    machine: await describeMachine(),
  };
  console.log(`results: ${saveResult('commands', result)}`);
}

await main();
