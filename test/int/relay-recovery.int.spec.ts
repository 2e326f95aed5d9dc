import { describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { createOutboxMetrics } from '../../src/outbox/outbox-metrics.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { accountCommands } from '../support/accounts.ts';
import { createTestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { natsClient, startNats } from '../support/nats.ts';
import { relayDeps } from '../support/relay.ts';
import { createStream, ownStream, readStream } from '../support/stream.ts';

describe('relay - recovery after a broker outage', () => {
  it('publishes within moments of the broker coming back, not after the rest of a back-off grown long during the outage', async () => {
    await using broker = await startNats();
    await using t = await createTestDb();
    const stream = ownStream('RECOVERY');
    const admin = await natsClient(broker.url);
    await createStream(admin, stream);
    await admin.close();
    const metrics = createOutboxMetrics(createMetrics());
    const relay = createRelay(
      relayDeps(t, broker.url, {
        stream,
        metrics,
        // back-offs of 1, 2, 4, 8 s (±20 %) after publishes that time out at once
        settings: { backoffBaseMs: 1000, maxBackoffMs: 60_000, publishTimeoutMs: 300 },
        lease: { owner: 'recovering-relay', ttlMs: 30_000 },
      }),
    );
    const stop = new AbortController();
    const running = relay.run({ signal: stop.signal, timeLimitMs: 60_000 });
    await eventually(async () => relay.state() === 'connected', { what: 'the relay connected' });

    await broker.kill();
    const ids = await accountCommands(t.deps).openMany(20);
    // the fourth failure starts a back-off of 6.4–9.6 s; the broker comes back right at its start
    await eventually(async () => metrics.publishErrors.get('broker_unavailable') >= 4, { what: 'four failed attempts', timeoutMs: 20_000 });
    await broker.restart();
    const restartedAt = Date.now();

    const nc = await natsClient(broker.url);
    await eventually(async () => (await readStream(nc, stream)).length === ids.length, { what: 'every event published', timeoutMs: 20_000 });
    // the reconnect (every 500 ms) plus one pass; without the cut the relay would sleep out that back-off (≥ 6.4 s)
    expect(Date.now() - restartedAt).toBeLessThan(4000);
    stop.abort();
    const summary = await running;
    expect(summary.brokerErrors).toBeGreaterThanOrEqual(3);
    await nc.close();
  });
});
