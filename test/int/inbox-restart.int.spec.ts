import { jetstreamManager } from '@nats-io/jetstream';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { creditedEvent } from '../support/accounts.ts';
import { createSubscriberDb, testRunner } from '../support/consumer.ts';
import { countRows } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { balances, readOwnerBalance } from '../support/fixture/subscribers/balances/subscriber.ts';
import { natsClient } from '../support/nats.ts';
import { createStream, ownStream, publishEvents } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

// Its own server: the tests restart it, so they open their own connections around the restarts.
const nats = useNats();

describe('inbox - broker outages', () => {
  it('resumes from its durable consumer after the broker restarts mid-consumption, with every event applied exactly once', async () => {
    const stream = ownStream('RS');
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    let nc = await natsClient(nats().url);
    await createStream(nc, stream);
    await publishEvents(
      nc,
      stream,
      Array.from({ length: 150 }, () => creditedEvent({ owner: 'restart-owner', amountCents: 10 })),
    );
    await nc.close();

    let seen = 0;
    let restarted: Promise<void> | undefined;
    const stop = new AbortController();
    const runner = testRunner(sdb, nats().url, balances, stream, {
      batch: 10,
      faults: {
        // After 40 commits, kill and relaunch the broker while this runner holds unacknowledged messages.
        async afterCommit() {
          if (++seen === 40) {
            restarted = nats().server.restart();
            await restarted;
          }
        },
      },
    });
    const running = runner.run({ signal: stop.signal, timeLimitMs: 45_000 });

    await eventually(async () => restarted !== undefined, { what: 'the restart', timeoutMs: 30_000 });
    await restarted;
    nc = await natsClient(nats().url);
    await publishEvents(
      nc,
      stream,
      Array.from({ length: 50 }, () => creditedEvent({ owner: 'restart-owner', amountCents: 10 })),
    );
    await nc.close();

    await eventually(async () => (await readOwnerBalance(sdb.db, 'restart-owner')).creditedCents >= 2000, {
      what: 'all 200 events applied',
      timeoutMs: 40_000,
    });
    stop.abort();
    const summary = await running;

    expect(await readOwnerBalance(sdb.db, 'restart-owner')).toMatchObject({ creditedCents: 2000 });
    expect(await countRows(sdb.client, 'inbox')).toBe(200);
    expect(summary.processed).toBe(200);
    expect(runner.state()).toBe('connected');
  });

  it('waits for a broker that is down when it starts, then consumes what was published meanwhile', async () => {
    const stream = ownStream('DN');
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    await nats().server.stop();
    const stop = new AbortController();
    const runner = testRunner(sdb, nats().url, balances, stream);
    const running = runner.run({ signal: stop.signal, timeLimitMs: 30_000 });
    await eventually(async () => runner.state() === 'unavailable', { what: 'the runner to notice the outage' });

    await nats().server.restart();
    const nc = await natsClient(nats().url);
    await createStream(nc, stream);
    await publishEvents(nc, stream, [creditedEvent({ owner: 'late-owner', amountCents: 42 })]);
    await nc.close();

    await eventually(async () => (await readOwnerBalance(sdb.db, 'late-owner')).creditedCents === 42, { what: 'the event applied' });
    stop.abort();
    const summary = await running;
    expect(summary.brokerErrors).toBeGreaterThanOrEqual(1);
    expect(summary.processed).toBe(1);
    expect(await readOwnerBalance(sdb.db, 'late-owner')).toMatchObject({ creditedCents: 42 });
  });

  it('connects within moments of a broker that comes up after its back-off grew long', async () => {
    const stream = ownStream('LB');
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    await nats().server.stop();
    const stop = new AbortController();
    // back-offs of 1, 2, 4, 8, 16 s (±20 %)
    const runner = testRunner(sdb, nats().url, balances, stream, { backoffBaseMs: 1000, maxBackoffMs: 60_000 });
    const running = runner.run({ signal: stop.signal, timeLimitMs: 60_000 });
    await eventually(async () => runner.state() === 'unavailable', { what: 'the runner to notice the outage' });
    // four failed connects: sleeping out the back-off after them would take ≥ 6.4 s
    await new Promise((r) => setTimeout(r, 4500));
    await nats().server.restart();
    const restartedAt = Date.now();
    const nc = await natsClient(nats().url);
    await createStream(nc, stream);
    await publishEvents(nc, stream, [creditedEvent({ owner: 'prompt-owner', amountCents: 7 })]);
    await eventually(async () => (await readOwnerBalance(sdb.db, 'prompt-owner')).creditedCents === 7, { what: 'the event applied', timeoutMs: 20_000 });
    expect(Date.now() - restartedAt).toBeLessThan(4000);
    await nc.close();
    stop.abort();
    const summary = await running;
    expect(summary.brokerErrors).toBeGreaterThanOrEqual(4);
  });

  // last in this file: it wipes the server's store, every stream of the tests above with it
  it('re-creates its stream and consumer when the broker comes back without its store, and applies the events published afterwards', async () => {
    const stream = ownStream('LOST');
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    const stop = new AbortController();
    const runner = testRunner(sdb, nats().url, balances, stream);
    const running = runner.run({ signal: stop.signal, timeLimitMs: 45_000 });
    const consumerExists = async () => {
      const nc = await natsClient(nats().url);
      try {
        return await (await jetstreamManager(nc)).consumers.info(stream.name, 'balances').then(
          () => true,
          () => false,
        );
      } finally {
        await nc.close();
      }
    };
    await eventually(consumerExists, { what: 'the stream and the consumer' });
    let nc = await natsClient(nats().url);
    await publishEvents(nc, stream, [creditedEvent({ owner: 'lost-owner', amountCents: 1 })]);
    await nc.close();
    await eventually(async () => (await readOwnerBalance(sdb.db, 'lost-owner')).creditedCents === 1, { what: 'the first event applied' });

    await nats().server.kill();
    rmSync(join(nats().server.storeDir, 'jetstream'), { recursive: true, force: true });
    await nats().server.restart();
    await eventually(consumerExists, { what: 'the stream and the consumer re-created', timeoutMs: 30_000 });
    nc = await natsClient(nats().url);
    await publishEvents(nc, stream, [creditedEvent({ owner: 'lost-owner', amountCents: 2 })]);
    await nc.close();
    await eventually(async () => (await readOwnerBalance(sdb.db, 'lost-owner')).creditedCents === 3, { what: 'the later event applied' });
    stop.abort();
    const summary = await running;

    expect(summary).toMatchObject({ processed: 2, deadLettered: 0 });
    expect(summary.brokerErrors).toBeGreaterThanOrEqual(1);
    expect(await countRows(sdb.client, 'inbox')).toBe(2);
  });
});
