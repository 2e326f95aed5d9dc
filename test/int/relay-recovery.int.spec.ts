import { describe, expect, it } from 'vitest';
import { errors, type NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { natsConnectionOptions } from '../../src/nats/connect.ts';
import { accountCommands } from '../support/accounts.ts';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { createTestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { natsClient, startNats, type NatsServer } from '../support/nats.ts';
import { relayDeps, runRelay } from '../support/relay.ts';
import { createStream, ownStream, readStream } from '../support/stream.ts';

/** A stream tagged `tag` (ownStream), created on `broker`. */
async function streamOn(broker: NatsServer, tag: string): Promise<StreamSettings> {
  const stream = ownStream(tag);
  const admin = await natsClient(broker.url);
  await createStream(admin, stream);
  await admin.close();
  return stream;
}

/** Restarts `broker` and resolves with the ms until `stream` holds `count` messages. */
async function msUntilPublishedAfterRestart(broker: NatsServer, stream: StreamSettings, count: number): Promise<number> {
  await broker.restart();
  const restartedAt = Date.now();
  const nc = await natsClient(broker.url);
  try {
    await eventually(async () => (await readStream(nc, stream)).length === count, { what: 'every event published', timeoutMs: 20_000 });
    return Date.now() - restartedAt;
  } finally {
    await nc.close();
  }
}

describe('relay - recovery after a broker outage', () => {
  it('publishes within moments of the broker coming back, not after the rest of a back-off grown long during the outage', async () => {
    await using broker = await startNats();
    await using t = await createTestDb();
    const stream = await streamOn(broker, 'RECOVERY');
    const { relay, metrics, stop } = runRelay(
      relayDeps(t, broker.url, {
        stream,
        // back-offs of 1, 2, 4, 8 s (±20 %) after publishes that time out at once
        settings: { backoffBaseMs: 1000, maxBackoffMs: 60_000, publishTimeoutMs: 300 },
        lease: { owner: 'recovering-relay', ttlMs: 30_000 },
      }),
    );
    await eventually(async () => relay.state() === 'connected', { what: 'the relay connected' });

    await broker.kill();
    const ids = await accountCommands(t.deps).openMany(20);
    // the fourth failure starts a back-off of 6.4–9.6 s; the broker comes back right at its start
    await eventually(async () => metrics.publishErrors.get('broker_unavailable') >= 4, { what: 'four failed attempts', timeoutMs: 20_000 });
    // the reconnect (every 500 ms) plus one pass; without the cut the relay would sleep out that back-off (≥ 6.4 s)
    expect(await msUntilPublishedAfterRestart(broker, stream, ids.length)).toBeLessThan(4000);
    const summary = await stop();
    expect(summary.brokerErrors).toBeGreaterThanOrEqual(3);
  });

  it('connects within moments of a broker that was down when it started, however long its back-off has grown', async () => {
    await using broker = await startNats();
    await using t = await createTestDb();
    const stream = await streamOn(broker, 'DOWNATSTART');
    await broker.kill();
    const ids = await accountCommands(t.deps).openMany(5);
    const { metrics, stop } = runRelay(
      relayDeps(t, broker.url, {
        stream,
        // back-offs of 1, 2, 4, 8, 16 s (±20 %): no connection, so no reconnect can end one
        settings: { backoffBaseMs: 1000, maxBackoffMs: 60_000 },
        lease: { owner: 'early-relay', ttlMs: 30_000 },
      }),
    );
    await eventually(async () => metrics.publishErrors.get('broker_unavailable') >= 4, { what: 'four failed connects', timeoutMs: 20_000 });
    // a connect attempt at least every second; sleeping out the back-off after four failures would take ≥ 6.4 s
    expect(await msUntilPublishedAfterRestart(broker, stream, ids.length)).toBeLessThan(4000);
    await stop();
  });

  it('still backs off a broker that refuses every publish although the connection comes back during each attempt', async () => {
    await using broker = await startNats();
    await using t = await createTestDb();
    const stream = await streamOn(broker, 'FLAPPING');
    let nc: NatsConnection | undefined;
    let reconnects = 0;
    /** When each attempt reached its publishes, and when its connection was back and the broker refused them. */
    const attempts: Array<{ start: number; end: number }> = [];
    const deps = relayDeps(t, broker.url, {
      stream,
      connect: async () => {
        const opened = await connect(natsConnectionOptions({ servers: [broker.url], name: 'flapping relay' }));
        void (async () => {
          for await (const status of opened.status()) if (status.type === 'reconnect') reconnects++;
        })();
        nc = opened;
        return opened;
      },
      // every wait 1.2–1.8 s
      settings: { backoffBaseMs: 1500, maxBackoffMs: 1500, publishTimeoutMs: 1000 },
      lease: { owner: 'flapping-relay', ttlMs: 30_000 },
      faults: {
        // each attempt loses its connection, which comes back before the broker refuses the publishes
        beforePublishing: async () => {
          const start = Date.now();
          const before = reconnects;
          await nc!.reconnect();
          await eventually(() => reconnects > before, { what: 'the connection back', everyMs: 5, timeoutMs: 5000 });
          attempts.push({ start, end: Date.now() });
        },
        beforePublish: () => new errors.TimeoutError(),
      },
    });
    await accountCommands(t.deps).openMany(5);
    const { stop } = runRelay(deps, 30_000);
    await eventually(() => attempts.length >= 6, { what: 'six failed attempts', timeoutMs: 20_000 });
    const summary = await stop();
    expect(summary.published).toBe(0);
    expect(summary.brokerErrors).toBeGreaterThanOrEqual(6);
    // how long the relay waited after each failed attempt before the next reached its publishes
    const gaps = attempts.slice(1).map((a, k) => a.start - attempts[k]!.end);
    // the connection that came back during the first failed attempt spares that wait ...
    expect(gaps.some((g) => g < 1000)).toBe(true);
    // ... but never two in a row: at least every other failure is waited out in full, however often it reconnects
    for (let k = 1; k < gaps.length; k++) expect(Math.max(gaps[k - 1]!, gaps[k]!), `gaps ${gaps.join(', ')} ms`).toBeGreaterThanOrEqual(1000);
  });
});
