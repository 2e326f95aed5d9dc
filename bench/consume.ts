// node --import tsx bench/consume.ts [--events 20000] [--rounds 5] [--batch 256] [--only inbox|plain]
// (`--only` runs one path alone, e.g. under `node --cpu-prof --import tsx bench/consume.ts --only inbox`; no ratio then.)
// Pre-publishes M order events (~300 B) to a fresh stream on a private nats-server, then consumes all of them with
// the `reporting` handler (a) through the inbox (handleBatch: one write per pulled batch with the inbox claims and
// the effects, ack after commit) and (b) through the same runner, batching and validation without the inbox claim. Each round
// uses fresh durable consumers and fresh subscriber databases, after one uncounted round of each path; medians are
// reported. No assertion on timings.
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { headers } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { loadavg } from 'node:os';
import { registryOf } from '../src/compose/define-modules.ts';
import { subscriberMigrationsFolder } from '../src/entry/boot.ts';
import type { IntegrationEvent } from '../src/events/integration-event.ts';
import { applyWithoutInbox } from '../src/inbox/without-inbox.ts';
import type { ConsumerRunner } from '../src/inbox/consumer-runner.ts';
import type { InboxMessage } from '../src/inbox/inbox-message.ts';
import { createUuidV7 } from '../src/ids.ts';
import { modules } from '../src/modules.ts';
import { ensureStream } from '../src/nats/ensure-stream.ts';
import { reporting } from '../src/subscribers/reporting/subscriber.ts';
import { createSubscriberDb, testRunner } from '../test/support/consumer.ts';
import { TEST_STREAM } from '../test/support/stream.ts';
import { stringArg } from './variants/launch.ts';
import { numberArg, percentile, round, saveResult, startNats } from './support.ts';

const M = numberArg('events', 20_000);
const ROUNDS = numberArg('rounds', 5);
const BATCH = numberArg('batch', 256);
const ONLY = stringArg('only', 'both');
if (!['both', 'inbox', 'plain'].includes(ONLY)) throw new Error('--only must be inbox or plain');
const IN_FLIGHT = 256;

function orderEvents(n: number): IntegrationEvent[] {
  const newId = createUuidV7();
  return Array.from({ length: n }, (_, i) => {
    const orderId = newId();
    const at = new Date(Date.UTC(2026, 0, 1) + i).toISOString();
    const items = [{ sku: `sku-${i % 97}`, quantity: 1 + (i % 3), unitPriceCents: 1250 }];
    return {
      eventId: newId(),
      type: 'order.placed.v1',
      aggregateType: 'order',
      aggregateId: orderId,
      aggregateVersion: 1,
      occurredAt: at,
      data: {
        orderId,
        customerId: `c${i % 500}`,
        currency: 'EUR',
        items,
        totalCents: items.reduce((s, l) => s + l.quantity * l.unitPriceCents, 0),
        placedAt: at,
      },
    };
  });
}

async function prePublish(url: string, stream: typeof TEST_STREAM, events: IntegrationEvent[]): Promise<number> {
  const nc = await connect({ servers: [url] });
  await ensureStream(await jetstreamManager(nc), stream);
  const js = jetstream(nc);
  const enc = new TextEncoder();
  const inFlight = new Set<Promise<unknown>>();
  let bytes = 0;
  for (const e of events) {
    while (inFlight.size >= IN_FLIGHT) await Promise.race(inFlight);
    const body = enc.encode(JSON.stringify(e));
    bytes += body.length;
    const h = headers();
    h.set('Event-Type', e.type);
    h.set('Content-Type', 'application/json');
    const p = js.publish(`${stream.prefix}.order.${e.aggregateId}`, body, { msgID: e.eventId, headers: h }).finally(() => inFlight.delete(p));
    inFlight.add(p);
  }
  await Promise.all(inFlight);
  await nc.close();
  return Math.round(bytes / events.length);
}

/** Consumes the whole stream with a fresh durable consumer and database; returns events/s. */
async function consumeAll(
  url: string,
  stream: typeof TEST_STREAM,
  name: string,
  withInbox: boolean,
): Promise<{ perSec: number; perCpuSec: number; check: number }> {
  const sdb = await createSubscriberDb({ migrations: subscriberMigrationsFolder('reporting') });
  try {
    // The same runner and batch handling (decoding, validation, spans, metrics, one write per batch, the handler in
    // order) with and without the inbox claim: only the claim differs.
    const registry = registryOf(modules);
    const runner: ConsumerRunner = testRunner(sdb, url, { ...reporting, name }, stream, {
      registry,
      batch: BATCH,
      ...(withInbox ? {} : { processBatch: (msgs: InboxMessage[]) => applyWithoutInbox(runner.inbox)(msgs) }),
    });
    const start = performance.now();
    const cpu0 = process.cpuUsage();
    const summary = await runner.run({ maxMessages: M, timeLimitMs: 600_000 });
    const secs = (performance.now() - start) / 1000;
    const cpu = process.cpuUsage(cpu0);
    if (summary.processed !== M) throw new Error(`${name}: processed ${summary.processed} of ${M}`);
    const check = Number((await sdb.client.execute('SELECT sum(orders_placed) FROM customer_reports')).rows[0]![0]);
    return { perSec: M / secs, perCpuSec: M / ((cpu.user + cpu.system) / 1e6), check };
  } finally {
    sdb.close();
  }
}

async function main() {
  const nats = await startNats();
  try {
    const stream = { ...TEST_STREAM, name: 'CONSUME_BENCH', prefix: 'cb', maxBytes: 2 * 1024 ** 3 };
    const avgBytes = await prePublish(nats.url, stream, orderEvents(M));
    const inbox: number[] = [];
    const plain: number[] = [];
    const inboxCpu: number[] = [];
    const plainCpu: number[] = [];
    // one uncounted round of each path first: otherwise the path that opens round 0 pays the process's warm-up
    // (JIT, the broker's first reads) and, with an odd number of rounds, opens more rounds than the other
    for (const withInbox of [true, false].filter((w) => ONLY === 'both' || w === (ONLY === 'inbox'))) {
      await consumeAll(nats.url, stream, `${withInbox ? 'inbox' : 'plain'}_warm`, withInbox);
    }
    for (let r = 0; r < ROUNDS; r++) {
      // alternate the order so neither path always runs on a warmer process
      const order = (r % 2 === 0 ? [true, false] : [false, true]).filter((w) => ONLY === 'both' || w === (ONLY === 'inbox'));
      for (const withInbox of order) {
        const res = await consumeAll(nats.url, stream, `${withInbox ? 'inbox' : 'plain'}_${r}`, withInbox);
        if (res.check !== M) throw new Error(`read model counted ${res.check} of ${M} events`);
        (withInbox ? inbox : plain).push(res.perSec);
        (withInbox ? inboxCpu : plainCpu).push(res.perCpuSec);
      }
    }
    const a = percentile(inbox, 50);
    const b = percentile(plain, 50);
    const aCpu = percentile(inboxCpu, 50);
    const bCpu = percentile(plainCpu, 50);
    const result = {
      bench: 'consume',
      events: M,
      avgPayloadBytes: avgBytes,
      batch: BATCH,
      rounds: ROUNDS,
      inboxPerSec: Math.round(a),
      withoutInboxPerSec: Math.round(b),
      ratioInboxToWithout: round(a / b),
      // events per CPU-second of this process: steadier than wall time on a shared machine
      inboxPerCpuSec: Math.round(aCpu),
      withoutInboxPerCpuSec: Math.round(bCpu),
      cpuRatioInboxToWithout: round(aCpu / bCpu),
      loadAverage: loadavg().map((x) => round(x)),
      samples: { inbox: inbox.map((x) => Math.round(x)), withoutInbox: plain.map((x) => Math.round(x)) },
    };
    console.log(`(a) reporting through the inbox:  ${result.inboxPerSec} ev/s (median of ${ROUNDS}; ${M} × ~${avgBytes} B, batch ${BATCH})`);
    console.log(`(b) same handler, no inbox row:   ${result.withoutInboxPerSec} ev/s`);
    console.log(`    ratio a/b = ${result.ratioInboxToWithout} (target ≥ 0.9)`);
    console.log(
      `    per CPU-second of the consumer: ${result.inboxPerCpuSec} vs ${result.withoutInboxPerCpuSec}, ratio ${result.cpuRatioInboxToWithout} (load average ${result.loadAverage.join(' ')})`,
    );
    console.log(JSON.stringify(result));
    console.log(`results: ${saveResult('consume', result)}`);
  } finally {
    await nats[Symbol.asyncDispose]();
  }
}

await main();
