// node --import tsx bench/publish-pipeline.ts [--messages 20000] [--rounds 2]
// What a pipelined JetStream publisher's own choices cost, on one private nats-server in one run: the same messages
// (~477 B body, 7 headers, a Nats-Msg-Id each, 256 in flight, one connection) published
//   (a) awaiting a free slot before every publish, as the relay does (each publish then leaves in its own socket write),
//   (b) awaiting only when the window is full (publishes queued in one turn share a write),
//   (c) as (a) on a connection with `noAsyncTraces: true` (no Error objects built per request for async stack traces),
//   (d) as (b) with `noAsyncTraces: true`.
// Prints msg/s and the publisher's CPU per message, each as a ratio to (a) measured in the same round.
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { headers } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { ensureStream } from '../src/nats/ensure-stream.ts';
import { createInFlight } from '../src/outbox/in-flight.ts';
import { TEST_STREAM } from '../test/support/stream.ts';
import { numberArg, round, startNats } from './support.ts';

const N = numberArg('messages', 20_000);
const ROUNDS = numberArg('rounds', 2);
const IN_FLIGHT = 256;

const nats = await startNats();
const body = new TextEncoder().encode(JSON.stringify({ padding: 'x'.repeat(460) }));

async function run(name: string, awaitEvery: boolean, noAsyncTraces: boolean): Promise<{ perSec: number; cpuUs: number }> {
  const nc = await connect({ servers: [nats.url], noAsyncTraces });
  const jsm = await jetstreamManager(nc);
  await ensureStream(jsm, { ...TEST_STREAM, name, prefix: name.toLowerCase(), maxBytes: 2 * 1024 ** 3 });
  const js = jetstream(nc);
  const inFlight = createInFlight(IN_FLIGHT);
  let live = 0;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  for (let i = 0; i < N; i++) {
    if (awaitEvery || live >= IN_FLIGHT) await inFlight.slot();
    const h = headers();
    for (const [k, v] of [
      ['Event-Type', 'order.placed.v1'],
      ['Aggregate-Type', 'order'],
      ['Aggregate-Id', `ord-${i}`],
      ['Aggregate-Version', '1'],
      ['Occurred-At', new Date(0).toISOString()],
      ['Content-Type', 'application/json'],
      ['traceparent', `00-${'1'.repeat(32)}-${'2'.repeat(16)}-01`],
    ])
      h.set(k!, v!);
    live++;
    inFlight.track(js.publish(`${name.toLowerCase()}.order.ord-${i}.0`, body, { msgID: `${name}-${i}`, headers: h }).finally(() => live--));
  }
  await inFlight.drained();
  const ms = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  await jsm.streams.delete(name);
  await nc.close();
  return { perSec: Math.round(N / (ms / 1000)), cpuUs: Math.round((cpu.user + cpu.system) / N) };
}

try {
  for (let r = 0; r < ROUNDS; r++) {
    const a = await run(`PA${r}`, true, false);
    const b = await run(`PB${r}`, false, false);
    const c = await run(`PC${r}`, true, true);
    const d = await run(`PD${r}`, false, true);
    console.log(`round ${r + 1} (${N} messages, ${IN_FLIGHT} in flight):`);
    for (const [label, x] of [
      ['(a) await every slot (as the relay)', a],
      ['(b) await only when full', b],
      ['(c) (a) + noAsyncTraces', c],
      ['(d) (b) + noAsyncTraces', d],
    ] as const)
      console.log(
        `  ${label.padEnd(36)} ${String(x.perSec).padStart(6)} msg/s (× ${round(x.perSec / a.perSec)}), ${x.cpuUs} µs CPU/msg (× ${round(x.cpuUs / a.cpuUs)})`,
      );
  }
} finally {
  await nats[Symbol.asyncDispose]();
}
