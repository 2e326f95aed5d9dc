// npm run bench:commands [-- --runtime node|bun|deno|all] [--connections 32] [--seconds 10] [--warmup 2]
// POST /orders throughput and latency with autocannon (in this Node process) against four servers, each its own
// child process on a free loopback port, one after the other, same runtime per row:
//   (a) ceiling     Hono + the same zod validation, answers without I/O (the HTTP ceiling)
//   (b) state-only  the real app and writer, the order rows only (no appendToOutbox)
//   (c) outbox      the real service entry, ROLES=api: state + outbox rows in one transaction
//   (d) dual-write  (b) then an awaited JetStream publish before answering, to a private nats-server
// Every server gets a fresh database. Prints req/s and p50/p99 and the ratios c/b, c/d, c/a. No assertion on timings.
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { createTempDir, orderBody } from '../test/support/db.ts';
import { RUNTIMES, type Runtime } from '../test/support/process.ts';
import { startServer, stringArg } from './variants/launch.ts';
import { describeMachine } from './variants/machine.ts';
import { numberArg, round, saveResult, startNats } from './support.ts';

const CONNECTIONS = numberArg('connections', 32);
const SECONDS = numberArg('seconds', 10);
const WARMUP = numberArg('warmup', 2);
const runtimeArg = stringArg('runtime', 'all');
const runtimes: Runtime[] = runtimeArg === 'all' ? [...RUNTIMES] : (runtimeArg.split(',') as Runtime[]);
for (const r of runtimes) if (!RUNTIMES.includes(r)) throw new Error(`--runtime must be node, bun, deno or all (got ${r})`);

type AutocannonResult = {
  '2xx': number;
  non2xx: number;
  errors: number;
  timeouts: number;
  duration: number;
  latency: { p50: number; p99: number; average: number; max: number };
};
type Autocannon = (o: { url: string; method: 'POST'; headers: Record<string, string>; body: string; connections: number; duration: number; pipelining: number }) => Promise<AutocannonResult>;
const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon;

type Variant = { key: 'a' | 'b' | 'c' | 'd'; id: string; label: string; entry: (r: Runtime) => string; env: Record<string, string> };
const VARIANT_SERVER = 'bench/variants/serve.ts';
const VARIANTS: Variant[] = [
  { key: 'a', id: 'ceiling', label: 'Hono + zod, no I/O (HTTP ceiling)', entry: () => VARIANT_SERVER, env: { VARIANT: 'ceiling' } },
  { key: 'b', id: 'stateOnly', label: 'order rows only, no outbox', entry: () => VARIANT_SERVER, env: { VARIANT: 'state-only' } },
  { key: 'c', id: 'outbox', label: 'real path: state + outbox, one tx', entry: (r) => `src/entry/${r}.ts`, env: { ROLES: 'api' } },
  { key: 'd', id: 'dualWrite', label: 'dual write: state, then awaited publish', entry: () => VARIANT_SERVER, env: { VARIANT: 'dual-write' } },
];

type VariantResult = { reqPerSec: number; p50Ms: number; p99Ms: number; avgMs: number; maxMs: number; ok: number; non2xx: number; errors: number; timeouts: number } | { error: string };

const body = JSON.stringify(orderBody());
const load = (url: string, seconds: number) =>
  autocannon({ url: `${url}/orders`, method: 'POST', headers: { 'content-type': 'application/json' }, body, connections: CONNECTIONS, duration: seconds, pipelining: 1 });

async function measure(runtime: Runtime, v: Variant, natsUrl: string, dir: string): Promise<VariantResult> {
  const env = { ...v.env, DATABASE_URL: `file:${join(dir, `${runtime}-${v.id}.db`)}`, NATS_URL: natsUrl, NATS_STREAM: `BENCH_${runtime.toUpperCase()}`, EVENTS_SUBJECT_PREFIX: `bench_${runtime}` };
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
    if (WARMUP > 0) await load(server.url, WARMUP);
    const r = await load(server.url, SECONDS);
    return {
      reqPerSec: Math.round(r['2xx'] / r.duration),
      p50Ms: r.latency.p50,
      p99Ms: r.latency.p99,
      avgMs: round(r.latency.average),
      maxMs: r.latency.max,
      ok: r['2xx'],
      non2xx: r.non2xx,
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
  const byRuntime: Record<string, { variants: Record<string, VariantResult>; ratios: { cOverB: number; cOverD: number; cOverA: number } }> = {};
  try {
    for (const runtime of runtimes) {
      const variants: Record<string, VariantResult> = {};
      for (const v of VARIANTS) {
        process.stdout.write(`${runtime} (${v.key}) ${v.id} … `);
        const r = await measure(runtime, v, nats.url, tmp.dir);
        variants[v.id] = r;
        console.log('error' in r ? `ERROR ${r.error}` : `${r.reqPerSec} req/s, p50 ${r.p50Ms} ms, p99 ${r.p99Ms} ms${r.non2xx + r.errors + r.timeouts ? `, ${r.non2xx} non-2xx, ${r.errors} errors, ${r.timeouts} timeouts` : ''}`);
      }
      const [a, b, c, d] = VARIANTS.map((v) => variants[v.id]);
      byRuntime[runtime] = { variants, ratios: { cOverB: ratio(c, b), cOverD: ratio(c, d), cOverA: ratio(c, a) } };
    }
  } finally {
    tmp[Symbol.dispose]();
    await nats[Symbol.asyncDispose]();
  }

  console.log(`\nPOST /orders, ${CONNECTIONS} connections, ${SECONDS} s measured after ${WARMUP} s warm-up (autocannon in the bench process, server in a child)`);
  console.log(`${'runtime'.padEnd(8)}${VARIANTS.map((v) => `(${v.key}) ${v.id}`.padEnd(26)).join('')}c/b    c/d    c/a`);
  for (const [runtime, row] of Object.entries(byRuntime)) {
    const cells = VARIANTS.map((v) => {
      const r = row.variants[v.id];
      return (r && 'reqPerSec' in r ? `${r.reqPerSec}/s ${r.p50Ms}|${r.p99Ms} ms` : 'error').padEnd(26);
    });
    console.log(`${runtime.padEnd(8)}${cells.join('')}${String(row.ratios.cOverB).padEnd(7)}${String(row.ratios.cOverD).padEnd(7)}${row.ratios.cOverA}`);
  }
  const result = {
    bench: 'commands',
    connections: CONNECTIONS,
    seconds: SECONDS,
    warmupSeconds: WARMUP,
    variants: VARIANTS.map(({ key, id, label }) => ({ key, id, label })),
    runtimes: byRuntime,
    machine: await describeMachine(),
  };
  console.log(`results: ${saveResult('commands', result)}`);
}

await main();
