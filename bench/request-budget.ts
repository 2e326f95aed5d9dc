// node --import tsx bench/request-budget.ts [--seconds 10] [--warmup 3] [--connections 32] [--log-level warn]
//   [--entry src/entry/node.ts] [--keep <dir>] [--profile <file.cpuprofile> --requests N]
// Where the microseconds of one POST /orders go on Node. Starts the service (`ROLES=api`, as bench:commands starts
// variant (c): a fresh database, a private nats-server) under `node --cpu-prof`, loads it with wrk (32 connections)
// for a warm-up and then `--seconds`, stops it with SIGINT so the profile is written, and prints the main thread's
// time per request by area, from the self time of the samples taken during the measured window only (CLOCK_MONOTONIC
// on both sides), frames grouped by file path. With --profile, summarises an existing profile over its whole length
// (`--requests` answers). Every answer is checked: a run with a non-201 answer says so.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { orderBody } from '../test/support/example-orders.ts';
import { freePort, waitForHttp } from '../test/support/process.ts';
import { cpuSecondsOf, numberArg, startNats } from './support.ts';
import { startChild, stringArg } from './variants/launch.ts';
import { checkAnswers, runWrk } from './variants/wrk.ts';

type Frame = { functionName: string; url: string; lineNumber: number };
type Node = { id: number; callFrame: Frame; children?: number[] };
type Profile = { nodes: Node[]; samples: number[]; timeDeltas: number[]; startTime: number; endTime: number };

/**
 * Areas of a request, first match wins, by the frame's file (or, for frames without one, its name). Self time only:
 * a frame's callees are charged to their own files, so `src/http/command-route.ts` is the route's own code, not
 * the SQL it runs.
 */
const AREAS: Array<[area: string, match: (url: string, fn: string) => boolean]> = [
  ['GC', (_u, f) => f === '(garbage collector)'],
  ['(program): VM and native code outside JS', (_u, f) => f === '(program)'],
  ['HTTP server: node:http, net, streams', (u) => /^node:(_http|http|net|stream|internal\/(http|stream|streams|net|timers|js_stream))/.test(u)],
  ['HTTP adapter: @hono/node-server (Request/Response)', (u) => u.includes('@hono/node-server')],
  ['Web Request/Headers/Response (undici)', (u) => u.includes('internal/deps/undici') || u.startsWith('node:internal/webstreams')],
  ['zod validation (+ @hono/zod-validator, json-body)', (u) => /node_modules\/(zod|@hono\/zod-validator)\//.test(u) || u.endsWith('src/http/json-body.ts')],
  ['hono: body limit', (u) => u.includes('hono/dist/middleware/body-limit')],
  ['hono: request id', (u) => u.includes('hono/dist/middleware/request-id')],
  ['hono: routing, context, compose', (u) => /node_modules\/hono\//.test(u)],
  [
    'observe: span, metrics, access log, trace headers',
    (u) => /src\/(http\/(observe-requests|server-span|request-route|access-log|request-metrics|trace-headers)|telemetry\/|metrics\/)/.test(u),
  ],
  [
    'OpenTelemetry API + async context',
    (u) => u.includes('@opentelemetry/') || /node:(internal\/)?async_hooks|async_local_storage|internal\/async_context/.test(u),
  ],
  ['logger', (u) => /src\/(logger|recent-logs)\.ts/.test(u)],
  ['command: route, idempotency, handler, app', (u) => /src\/(http\/(command-route|idempotency)|contexts\/|app\.ts|errors\.ts)/.test(u)],
  ['appendToOutbox + event registry', (u) => /src\/(outbox\/(append-to-outbox|partition)|events\/)/.test(u)],
  ['ids (UUIDv7)', (u) => u.endsWith('src/ids.ts')],
  [
    'writer + libSQL (prepare, step, commit/fsync)',
    (u, f) => /src\/db\/|@libsql\/|libsql/.test(u) || (u === '' && /^(statement|database|stmt|db)\w*/i.test(f)),
  ],
  ['relay kick (core NATS publish)', (u) => /src\/outbox\/kicker\.ts|@nats-io\//.test(u)],
  ['promises, microtasks, timers (node internals)', (u, f) => /node:internal\/(process\/task_queues|timers|promise)/.test(u) || f === '(root)'],
  ['other node internals', (u) => u.startsWith('node:')],
  ['other JS', () => true],
];

/**
 * Inclusive time of the steps the issue names (each counted once per sample even when it recurses), by function
 * name and file: they overlap each other and the areas, so they are listed apart.
 */
const STEPS: Array<[step: string, match: (url: string, fn: string) => boolean]> = [
  ['observeRequests (span, metrics, access line) and all it wraps', (u, f) => f === 'observeRequestsMiddleware' && u.endsWith('observe-requests.ts')],
  ['zod body validation (zValidator middleware)', (u) => u.includes('@hono/zod-validator/')],
  ['runCommand (route handler: idempotency, writer.write, answer)', (u, f) => f === 'runCommand' && u.endsWith('command-route.ts')],
  ['  placeOrder (handler: domain, SQL, emit)', (_u, f) => f === 'placeOrder'],
  ['  appendToOutbox (registry.parse, checks, JSON, INSERT)', (_u, f) => f === 'appendToOutbox'],
  ['    registry.parse (envelope + data schemas)', (u, f) => f === 'parse' && u.endsWith('src/events/registry.ts')],
  ['    assertStorable', (_u, f) => f === 'assertStorable' || f === 'assertStorableJson'],
  ['  ids: newId (UUIDv7)', (u) => u.endsWith('src/ids.ts')],
  ['libSQL client (prepare, step, commit/fsync)', (u) => /@libsql\/|\/libsql\//.test(u)],
  ['relay kick (Kicker.kick + NATS publish)', (u) => u.endsWith('src/outbox/kicker.ts') || u.includes('@nats-io/')],
  [
    'Response writing (node-server responseViaCache / writeFromReadableStream)',
    (u, f) => u.includes('@hono/node-server') && /^(responseViaCache|writeFromReadableStream|writeFromReadableStreamDefaultReader)$/.test(f),
  ],
];

type Budget = {
  requests: number;
  windowSeconds: number;
  byArea: Map<string, number>;
  bySteps: Map<string, number>;
  topFrames: Array<[string, number]>;
  sampledUs: number;
  idleUs: number;
};

/** Self time per area (µs) of the samples taken in [fromUs, toUs] (the profile's clock); everything when omitted. */
export function budgetOf(profile: Profile, requests: number, window?: { fromUs: number; toUs: number }): Budget {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const SPECIAL = new Set(['(garbage collector)', '(program)', '(idle)', '(root)']);
  // a native frame (no file: writev, a regex, zod's generated parser) is charged to its nearest JS caller's file
  const owner = (id: number): Frame => {
    let cur: number | undefined = id;
    while (cur !== undefined) {
      const f = byId.get(cur)!.callFrame;
      if (f.url || SPECIAL.has(f.functionName)) return f;
      cur = parent.get(cur);
    }
    return byId.get(id)!.callFrame;
  };
  const byArea = new Map<string, number>();
  const bySteps = new Map<string, number>();
  const frames = new Map<string, number>();
  let t = profile.startTime;
  let sampledUs = 0;
  let idleUs = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    t += profile.timeDeltas[i]!;
    const dt = profile.timeDeltas[i + 1] ?? 0;
    if (window && (t < window.fromUs || t > window.toUs)) continue;
    const { functionName: fn, url, lineNumber } = byId.get(profile.samples[i]!)!.callFrame;
    if (fn === '(idle)') {
      idleUs += dt;
      continue;
    }
    sampledUs += dt;
    const own = owner(profile.samples[i]!);
    const area = AREAS.find(([, m]) => m(own.url.replace(/^file:\/\//, ''), own.functionName))![0];
    byArea.set(area, (byArea.get(area) ?? 0) + dt);
    const seen = new Set<string>();
    for (let cur: number | undefined = profile.samples[i]!; cur !== undefined; cur = parent.get(cur)) {
      const f = byId.get(cur)!.callFrame;
      const step = STEPS.find(([, m]) => m(f.url.replace(/^file:\/\//, ''), f.functionName))?.[0];
      if (step && !seen.has(step)) {
        seen.add(step);
        bySteps.set(step, (bySteps.get(step) ?? 0) + dt);
      }
    }
    const u = url.replace(/^file:\/\//, '');
    const label = `${fn || '(anonymous)'} ${u.replace(/^.*node_modules\//, '').replace(/^.*\/work\/main\//, '')}:${lineNumber + 1}`;
    frames.set(label, (frames.get(label) ?? 0) + dt);
  }
  const windowSeconds = window ? (window.toUs - window.fromUs) / 1e6 : (profile.endTime - profile.startTime) / 1e6;
  return { requests, windowSeconds, byArea, bySteps, topFrames: [...frames].sort((a, b) => b[1] - a[1]).slice(0, numberArg('top', 25)), sampledUs, idleUs };
}

/** The table: µs of main-thread time per request by area, largest first, and the top frames. */
export function printBudget(b: Budget, extra: string[] = []): void {
  const per = (us: number) => (us / b.requests).toFixed(1).padStart(7);
  console.log(
    `\n${b.requests} answers in ${b.windowSeconds.toFixed(2)} s (${Math.round(b.requests / b.windowSeconds)}/s); main thread busy ${per(b.sampledUs)} µs/request, idle ${per(b.idleUs)} µs/request`,
  );
  for (const l of extra) console.log(l);
  console.log('\nµs/request  share  area (self time)');
  for (const [area, us] of [...b.byArea].sort((x, y) => y[1] - x[1]))
    console.log(`${per(us)}  ${((100 * us) / b.sampledUs).toFixed(1).padStart(5)} %  ${area}`);
  console.log(`${per(b.sampledUs)}  100.0 %  total`);
  const db = [...b.byArea].find(([a]) => a.startsWith('writer + libSQL'))?.[1] ?? 0;
  console.log(`${per(b.sampledUs - db)}  ${((100 * (b.sampledUs - db)) / b.sampledUs).toFixed(1).padStart(5)} %  total without writer + libSQL`);
  console.log('\nµs/request  step (inclusive: the steps overlap)');
  for (const [step] of STEPS) console.log(`${per(b.bySteps.get(step) ?? 0)}  ${step}`);
  console.log('\ntop frames, µs/request (self)');
  for (const [label, us] of b.topFrames) console.log(`${per(us)}  ${label}`);
}

async function measure(): Promise<void> {
  const SECONDS = numberArg('seconds', 10);
  const WARMUP = numberArg('warmup', 3);
  const CONNECTIONS = numberArg('connections', 32);
  const entry = stringArg('entry', 'src/entry/node.ts');
  const keep = stringArg('keep', '');
  const dir = mkdtempSync(join(tmpdir(), 'hono-outbox-budget-'));
  const profDir = keep || join(dir, 'prof');
  const nats = await startNats();
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const server = startChild('api', process.execPath, ['--cpu-prof', '--cpu-prof-dir', profDir, '--import', 'tsx', entry], {
    ROLES: 'api',
    HOST: '127.0.0.1',
    PORT: String(port),
    LOG_LEVEL: stringArg('log-level', 'warn'),
    DATABASE_URL: `file:${join(dir, 'budget.db')}`,
    NATS_URL: nats.url,
    NATS_STREAM: 'BENCH_BUDGET',
    EVENTS_SUBJECT_PREFIX: 'bench_budget',
  });
  try {
    await Promise.race([
      waitForHttp(`${url}/health`, { timeoutMs: 60_000 }),
      server.exited.then((code) => {
        throw new Error(`the service exited with ${code}:\n${server.output()}`);
      }),
    ]);
    const place = [{ method: 'POST' as const, path: '/orders', headers: { 'content-type': 'application/json' }, body: JSON.stringify(orderBody()) }];
    if (WARMUP > 0) await runWrk(url, place, { connections: CONNECTIONS, seconds: WARMUP });
    const cpuBefore = cpuSecondsOf(server.proc.pid);
    const fromUs = Number(process.hrtime.bigint() / 1000n);
    const r = await runWrk(url, place, { connections: CONNECTIONS, seconds: SECONDS });
    const toUs = Number(process.hrtime.bigint() / 1000n);
    const cpuAfter = cpuSecondsOf(server.proc.pid);
    process.kill(server.proc.pid!, 'SIGINT');
    await server.exited;
    const check = checkAnswers(r, [201]);
    const file = readdirSync(profDir).filter((f) => f.endsWith('.cpuprofile'))[0];
    if (!file) throw new Error(`no profile written in ${profDir}:\n${server.output()}`);
    const profile = JSON.parse(readFileSync(join(profDir, file), 'utf8')) as Profile;
    const cpuUs = cpuBefore !== undefined && cpuAfter !== undefined ? ((cpuAfter - cpuBefore) * 1e6) / r.requests : undefined;
    printBudget(budgetOf(profile, r.requests, { fromUs, toUs }), [
      `wrk: ${Math.round(r.requests / r.seconds)} req/s, p50 ${r.latencyMs.p50} ms, p99 ${r.latencyMs.p99} ms; ${check.bad ? `ERRORS: ${check.problems.join(', ')}` : 'every answer 201'}`,
      ...(cpuUs !== undefined ? [`process CPU (all threads, /proc): ${cpuUs.toFixed(1)} µs/request`] : []),
      ...(keep ? [`profile: ${join(profDir, file)}`] : []),
    ]);
    if (check.bad) process.exitCode = 1;
  } finally {
    await server.stop();
    await nats[Symbol.asyncDispose]();
    rmSync(dir, { recursive: true, force: true });
  }
}

const existing = stringArg('profile', '');
if (existing) printBudget(budgetOf(JSON.parse(readFileSync(existing, 'utf8')) as Profile, numberArg('requests', 1)));
else await measure();
