// npm run bench:relay — for each payload size (--sizes 0,1024,8192: the example order, ~1 KiB, ~8 KiB), one relay
// PROCESS (the real entry, as `npm run relay` starts it) draining --rows 30000 rows, timed by the stream from its
// first message to its last, against raw pipelined JetStream publishing (256 in flight) of the same messages (same
// bodies, headers, subjects and Nats-Msg-Ids) in the same run, each with its CPU per message (the publishing process
// and nats-server); plus a cold start (a relay spawned on a database already holding the backlog: spawn → first
// publish, and its drain against raw), and backlog committed → first publish of a running one. The running relay's
// backlog arrives in one INSERT whose checkpoint (the writer's) overlaps the drain; the cold start's does not.
// --rounds R reports the median drain of each; --profile writes CPU profiles of the running relay's rounds and of the
// first cold start and prints their paths (`node --import tsx bench/cpu-profile-top.ts <file>` lists their top frames);
// the profiled drains carry the profiler's cost, so their rates are not figures to compare.
//
// npm run bench:relay -- --floor [--size 8192] — what bounds the relay on this machine (bench/relay-floor.ts): in one
// process, raw js.publish against the relay's own publisher, relay passes without any mark-sent write, and with them.
//   --rows N --rounds R  backlog rows (default 30 000) and alternating rounds (default 3), medians reported
//   --profile            CPU profiles of the relay passes alone (bench/cpu-profile-top.ts lists their top frames)
//
// npm run bench:relay -- --in-process — (a) raw pipelined JetStream publish vs (b) the relay draining the same number of
// outbox rows in the benchmark's own process; (c) commit → PubAck lag at a steady command rate.
//   --messages N      rows for (a)/(b) (default 20 000)
//   --rate R          commands per second for (c) (default 1000)
//   --seconds S       duration of (c) (default 30)
//
// npm run bench:relay -- --relays 1,2,4 — instead of (a)–(c): the drain rate of 1, 2, 4 … relay PROCESSES (the
// real entry, src/entry/relay.ts) sharing one outbox by partition leases, as ratios to one relay and to raw
// pipelined publishing of the same messages in the same run (see bench/relay-processes.ts for how it is timed).
//   --relays 1,2,4    relay process counts to compare
//   --rows N          backlog rows (default 20 000)
//   --lease-ttl-ms T  RELAY_LEASE_TTL_MS of those relays (default 3000: they settle in ~1 s)
//   --rounds R        runs per count, the median drain reported (default 1)
//   --profile         runs the relays of the first count and the first cold start with `node --cpu-prof`; the
//                     profiles' paths are printed
//                     (`node --import tsx bench/cpu-profile-top.ts <file.cpuprofile>` lists their top frames)
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { headers } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { placeOrder } from '../src/contexts/orders/place-order.ts';
import { createCommand } from '../src/http/command-route.ts';
import { ensureStream } from '../src/nats/ensure-stream.ts';
import { createRelay } from '../src/outbox/relay.ts';
import { createInFlight } from '../src/outbox/in-flight.ts';
import { eventHeaders } from '../src/outbox/event-headers.ts';
import type { Deps } from '../src/deps.ts';
import type { TestDb } from '../test/support/db.ts';
import { orderBody } from '../test/support/example-orders.ts';
import { relayDeps } from '../test/support/relay.ts';
import { TEST_STREAM } from '../test/support/stream.ts';
import { benchRelayFloor } from './relay-floor.ts';
import { benchRelayProcesses } from './relay-processes.ts';
import { createServiceDb, numberArg, percentile, round, saveResult, startNats } from './support.ts';
import { stringArg } from './variants/launch.ts';

const N = numberArg('messages', 20_000);
const RATE = numberArg('rate', 1000);
const SECONDS = numberArg('seconds', 30);
const IN_FLIGHT = 256;

/** Places one order through the writer as POST /orders does; resolves with its id once committed. */
async function placeOne(deps: Deps, body = orderBody()): Promise<string> {
  const outcome = await deps.writer.write((tx) => placeOrder(tx, body, createCommand(tx, deps)));
  if ('problem' in outcome) throw outcome.problem;
  return (outcome.body as { orderId: string }).orderId;
}

async function fillOutbox(t: TestDb, n: number, payloadBytes?: number): Promise<void> {
  // an order line holding a 64-character SKU adds ~105 bytes to the event; the envelope and order fields ~330
  const lines = payloadBytes === undefined ? undefined : Math.min(100, Math.max(1, Math.round((payloadBytes - 330) / 105)));
  const body =
    lines === undefined
      ? orderBody()
      : orderBody({
          items: Array.from({ length: lines }, (_, i) => ({ sku: `${'s'.repeat(60)}${String(i).padStart(4, '0')}`, quantity: 1, unitPriceCents: 100 })),
        });
  for (let done = 0; done < n; done += 500) {
    await Promise.all(Array.from({ length: Math.min(500, n - done) }, () => placeOne(t.deps, body)));
  }
}

/** Publishes pre-built messages pipelined; with `fullHeaders`, each carries the relay's headers, built beforehand. */
async function rawPublish(url: string, stream: string, prefix: string, payloads: string[], fullHeaders = false): Promise<number> {
  const nc = await connect({ servers: [url], noAsyncTraces: true });
  const js = jetstream(nc);
  const enc = new TextEncoder();
  const prebuilt = fullHeaders ? payloads.map((p) => eventHeaders(JSON.parse(p))) : undefined;
  const start = performance.now();
  const inFlight = createInFlight(IN_FLIGHT);
  for (let i = 0; i < payloads.length; i++) {
    // as the relay does: no await while a slot is free, so one turn's publishes share a socket write
    if (inFlight.full()) await inFlight.slot();
    const h = prebuilt?.[i] ?? headers();
    if (!prebuilt) h.set('Event-Type', 'order.placed.v1');
    inFlight.track(js.publish(`${prefix}.order.raw${i}`, enc.encode(payloads[i]!), { msgID: `raw-${stream}-${i}`, headers: h }));
  }
  await inFlight.drained();
  const secs = (performance.now() - start) / 1000;
  await nc.close();
  return payloads.length / secs;
}

async function main() {
  const nats = await startNats();
  try {
    // (b) first builds the rows; (a) publishes the very same payloads raw
    const t = await createServiceDb();
    await fillOutbox(t, N);
    const payloads = (await t.client.execute('SELECT payload FROM outbox ORDER BY seq')).rows.map((r) => String(r[0]));
    const avgBytes = Math.round(payloads.reduce((s, p) => s + p.length, 0) / payloads.length);

    const nc = await connect({ servers: [nats.url] });
    const jsm = await jetstreamManager(nc);
    const rawStream = { ...TEST_STREAM, name: 'RAW', prefix: 'raw', maxBytes: 2 * 1024 ** 3 };
    await ensureStream(jsm, rawStream);
    const raw = await rawPublish(nats.url, rawStream.name, rawStream.prefix, payloads);
    const rawHeadersStream = { ...TEST_STREAM, name: 'RAWH', prefix: 'rawh', maxBytes: 2 * 1024 ** 3 };
    await ensureStream(jsm, rawHeadersStream);
    const rawWithHeaders = await rawPublish(nats.url, rawHeadersStream.name, rawHeadersStream.prefix, payloads, true);

    const relayStream = { ...TEST_STREAM, name: 'RELAY', prefix: 'relay', maxBytes: 2 * 1024 ** 3 };
    await ensureStream(jsm, relayStream);
    const deps = relayDeps(t, nats.url, { stream: relayStream, settings: { prefix: relayStream.prefix, maxInFlight: IN_FLIGHT } });
    const start = performance.now();
    const summary = await createRelay(deps).run({ untilIdle: true });
    const relayRate = summary.published / ((performance.now() - start) / 1000);
    t.close();

    // (c) steady command rate through the command handler, relay in the same process woken by each commit
    const t2 = await createServiceDb();
    const lagStream = { ...TEST_STREAM, name: 'LAG', prefix: 'lag', maxBytes: 2 * 1024 ** 3 };
    const committedAt = new Map<string, number>();
    const lags: number[] = [];
    const lagDeps = relayDeps(t2, nats.url, {
      stream: lagStream,
      wake: t2.deps.outboxCommitted,
      pollMs: 100,
      settings: { prefix: lagStream.prefix, maxInFlight: IN_FLIGHT },
      faults: {
        afterPubAcks(rows) {
          const now = performance.now();
          for (const r of rows) {
            const c = committedAt.get(r.aggregate_id);
            if (c !== undefined) lags.push(now - c);
          }
        },
      },
    });
    const stop = new AbortController();
    const relayRun = createRelay(lagDeps).run({ signal: stop.signal });
    const total = RATE * SECONDS;
    const begin = performance.now();
    const commands: Promise<void>[] = [];
    for (let i = 0; i < total; i++) {
      const due = begin + (i * 1000) / RATE;
      const wait = due - performance.now();
      if (wait > 1) await new Promise((r) => setTimeout(r, wait));
      commands.push(
        placeOne(t2.deps).then((orderId) => {
          committedAt.set(orderId, performance.now());
          t2.deps.outboxCommitted.notify();
        }),
      );
    }
    await Promise.all(commands);
    const achievedRate = total / ((performance.now() - begin) / 1000);
    while (lags.length < total && performance.now() - begin < (SECONDS + 30) * 1000) await new Promise((r) => setTimeout(r, 50));
    stop.abort();
    await relayRun;
    t2.close();
    await nc.close();

    const result = {
      bench: 'relay',
      messages: N,
      avgPayloadBytes: avgBytes,
      maxInFlight: IN_FLIGHT,
      rawPublishPerSec: Math.round(raw),
      rawWithRelayHeadersPerSec: Math.round(rawWithHeaders),
      ratioRelayToRawWithHeaders: round(relayRate / rawWithHeaders),
      relayDrainPerSec: Math.round(relayRate),
      ratioRelayToRaw: round(relayRate / raw),
      lag: {
        rate: RATE,
        seconds: SECONDS,
        achievedRate: Math.round(achievedRate),
        samples: lags.length,
        p50Ms: round(percentile(lags, 50)),
        p99Ms: round(percentile(lags, 99)),
        maxMs: round(Math.max(...lags)),
      },
    };
    console.log(`(a) raw pipelined JetStream publish: ${result.rawPublishPerSec} msg/s (${N} × ~${avgBytes} B, ${IN_FLIGHT} in flight)`);
    console.log(`(b) relay draining the outbox:        ${result.relayDrainPerSec} ev/s`);
    console.log(`    ratio b/a = ${result.ratioRelayToRaw} (target ≥ 0.8)`);
    console.log(
      `(a') raw publish with the relay's 7 headers, pre-built: ${result.rawWithRelayHeadersPerSec} msg/s; b/a' = ${result.ratioRelayToRawWithHeaders}`,
    );
    console.log(
      `(c) commit → PubAck at ${RATE}/s for ${SECONDS}s (achieved ${result.lag.achievedRate}/s): p50 ${result.lag.p50Ms} ms, p99 ${result.lag.p99Ms} ms, max ${result.lag.maxMs} ms (targets p50 ≤ 5, p99 ≤ 50)`,
    );
    console.log(`results: ${saveResult('relay', result)}`);
  } finally {
    await nats[Symbol.asyncDispose]();
  }
}

/**
 * The default run: for each payload size, one relay process (`src/entry/relay.ts`, as `npm run relay` starts it)
 * draining --rows rows against raw pipelined publishing of the same messages in the same run.
 */
async function sizes(list: number[], rows: number, rounds: number): Promise<void> {
  const runs = [];
  for (const bytes of list) {
    console.log(`\n--- payload ~${bytes} B ---`);
    const r = await benchRelayProcesses({
      counts: [1],
      rows,
      leaseTtlMs: numberArg('lease-ttl-ms', 3000),
      rounds,
      profile: process.argv.includes('--profile'),
      fill: (t, n) => fillOutbox(t, n, bytes === 0 ? undefined : bytes),
      save: false,
    });
    const one = r.relays[0]!;
    runs.push({
      avgPayloadBytes: r.avgPayloadBytes,
      rows,
      rawPublishPerSec: Math.round((r.rawPublishPerSec.before + r.rawPublishPerSec.after) / 2),
      rawBeforeAfter: r.rawPublishPerSec,
      rawCpuUsPerMsg: r.rawCpuUsPerMsg,
      relayPerSec: one.perSec,
      roundsPerSec: one.roundsPerSec,
      ratioToRaw: one.ratioToRaw,
      relayCpuUsPerEvent: one.relayCpuUsPerEvent,
      natsCpuUsPerEvent: one.natsCpuUsPerEvent,
      insertToFirstPublishMs: one.insertToFirstPublishMs,
      // the marks recorded apart during the drain are folded in once the relay has caught up: after its last publish
      lastPublishToAllMarkedMs: one.lastPublishToAllMarkedMs,
      spawnToFirstPublishMs: r.coldStart.spawnToFirstPublishMs,
      coldStartPerSec: r.coldStart.perSec,
      coldStartRatioToRaw: r.coldStart.ratioToRaw,
    });
  }
  console.log('\nrelay process vs raw pipelined publish (256 in flight), same messages, same run');
  console.log(
    'payload B | rows  | raw msg/s | relay ev/s | × raw | cold start ev/s | × raw | raw CPU µs/msg publisher + nats | relay + nats CPU µs/event | spawn → 1st publish ms | backlog → 1st publish ms | last publish → all marked ms',
  );
  for (const x of runs)
    console.log(
      `${String(x.avgPayloadBytes).padStart(9)} | ${String(x.rows).padStart(5)} | ${String(x.rawPublishPerSec).padStart(9)} | ${String(x.relayPerSec).padStart(10)} | ${String(x.ratioToRaw).padStart(5)} | ${String(x.coldStartPerSec).padStart(15)} | ${String(x.coldStartRatioToRaw).padStart(5)} | ${`${x.rawCpuUsPerMsg.publisher} + ${x.rawCpuUsPerMsg.nats ?? '?'}`.padStart(31)} | ${`${x.relayCpuUsPerEvent} + ${x.natsCpuUsPerEvent ?? '?'}`.padStart(25)} | ${String(x.spawnToFirstPublishMs).padStart(22)} | ${String(x.insertToFirstPublishMs).padStart(24)} | ${String(x.lastPublishToAllMarkedMs).padStart(28)}`,
    );
  console.log(`results: ${saveResult('relay', { bench: 'relay', mode: 'process', sizes: runs })}`);
}

const RELAYS = stringArg('relays', '');
if (RELAYS) {
  const counts = RELAYS.split(',').map((c) => Number(c.trim()));
  if (counts.some((c) => !Number.isInteger(c) || c < 1 || c > 16)) throw new Error(`--relays takes counts from 1 to 16, e.g. 1,2,4 (got ${RELAYS})`);
  await benchRelayProcesses({
    counts,
    rows: numberArg('rows', 20_000),
    leaseTtlMs: numberArg('lease-ttl-ms', 3000),
    rounds: numberArg('rounds', 1),
    profile: process.argv.includes('--profile'),
    fill: fillOutbox,
  });
} else if (process.argv.includes('--floor')) {
  await benchRelayFloor({
    rows: numberArg('rows', 30_000),
    rounds: numberArg('rounds', 3),
    fill: (t, n) => fillOutbox(t, n, numberArg('size', 0) || undefined),
    profile: process.argv.includes('--profile'),
  });
} else if (process.argv.includes('--in-process')) await main();
else {
  const list = stringArg('sizes', '0,1024,8192')
    .split(',')
    .map((x) => Number(x.trim()));
  if (list.some((x) => !Number.isInteger(x) || x < 0 || x > 12_000))
    throw new Error(`--sizes takes payload sizes in bytes up to 12000, 0 for the example order (got ${list})`);
  await sizes(list, numberArg('rows', 30_000), numberArg('rounds', 1));
}
