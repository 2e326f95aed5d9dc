import { describe, expect, it } from 'vitest';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { accountCommands, creditedEvent } from '../support/accounts.ts';
import { createSubscriberDb, testRunner } from '../support/consumer.ts';
import { countRows, createTestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { balances, readOwnerBalance } from '../support/fixture/subscribers/balances/subscriber.ts';
import { natsClient, startNats } from '../support/nats.ts';
import { relayDeps, runRelay } from '../support/relay.ts';
import { createStream, ownStream, publishEvents, readStream } from '../support/stream.ts';
import { msToStop } from '../support/frozen-broker.ts';

/** A new stream holding one credit of 10 cents to `owner`. */
async function streamWithOneCredit(url: string, tag: string, owner: string): Promise<StreamSettings> {
  const stream = ownStream(tag);
  const nc = await natsClient(url);
  await createStream(nc, stream);
  await publishEvents(nc, stream, [creditedEvent({ owner, amountCents: 10 })]);
  await nc.close();
  return stream;
}

// Each test owns its server: it freezes it. A frozen connection would be found stale only after two missed pings (20–30 s).
describe('stopping a subscriber run or a relay while the broker does not answer', () => {
  it('stops within seconds when its broker is frozen, instead of waiting for the connection to go stale, and the event it applied stays applied once', async () => {
    await using server = await startNats();
    const stream = await streamWithOneCredit(server.url, 'ST', 'stop-owner');
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });

    const stop = new AbortController();
    const running = testRunner(sdb, server.url, balances, stream).run({ signal: stop.signal, timeLimitMs: 50_000 });
    await eventually(async () => (await readOwnerBalance(sdb.db, 'stop-owner')).creditedCents === 10, { what: 'the event applied' });

    await server.pause();
    expect(await msToStop(() => (stop.abort(), running))).toBeLessThan(10_000);
    server.resume();
    expect((await readOwnerBalance(sdb.db, 'stop-owner')).creditedCents).toBe(10);
  }, 60_000);

  it('a run until idle also stops within seconds when its broker is frozen during an idle check', async () => {
    await using server = await startNats();
    const stream = await streamWithOneCredit(server.url, 'SI', 'idle-owner');
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });

    const stop = new AbortController();
    // idle checks every 2 s, each at least 2 s after the last delivery: the broker is frozen before the first that
    // can stop the run, which comes within 4 s of the start
    const running = testRunner(sdb, server.url, balances, stream, { idleCheckMs: 2000 }).run({ signal: stop.signal, untilIdle: true, timeLimitMs: 50_000 });
    await eventually(async () => (await readOwnerBalance(sdb.db, 'idle-owner')).creditedCents === 10, { what: 'the event applied' });
    await server.pause();
    // by now that idle check has started and waits on the frozen broker
    await new Promise((resolve) => setTimeout(resolve, 5000));
    expect(await msToStop(() => (stop.abort(), running))).toBeLessThan(10_000);
    server.resume();
    expect((await readOwnerBalance(sdb.db, 'idle-owner')).creditedCents).toBe(10);
  }, 60_000);

  it('a relay stops within seconds when its broker is frozen with publishes awaiting their PubAcks, and a new relay publishes each of them once when the broker answers again', async () => {
    await using server = await startNats();
    await using t = await createTestDb();
    const stream = ownStream('SR');
    const nc = await natsClient(server.url);
    await createStream(nc, stream);
    await nc.close();

    // PubAcks are awaited for 30 s, longer than the test waits for the stop
    const deps = relayDeps(t, server.url, { stream, settings: { publishTimeoutMs: 30_000 } });
    const first = runRelay(deps);
    await eventually(async () => first.relay.state() === 'connected', { what: 'the relay connected' });
    await server.pause();
    await accountCommands(t.deps).openMany(20);
    // a pass is publishing them into the frozen broker
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect(await msToStop(first.stop)).toBeLessThan(10_000);

    server.resume();
    const second = runRelay(relayDeps(t, server.url, { stream }));
    await eventually(async () => (await countRows(t.client, 'outbox', "status = 'sent'")) === 20, { what: 'every row sent', timeoutMs: 20_000 });
    await second.stop();
    const check = await natsClient(server.url);
    expect((await readStream(check, stream)).length).toBe(20);
    await check.close();
  }, 60_000);
});
