import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { creditedEvent } from '../support/accounts.ts';
import { createSubscriberDb, testRunner } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import { balances, readOwnerBalance } from '../support/fixture/subscribers/balances/subscriber.ts';
import { natsClient, startNats } from '../support/nats.ts';
import { createStream, ownStream, publishEvents } from '../support/stream.ts';
import { activeHandles, freezingConnect, msToStop } from '../support/frozen-broker.ts';

describe('subscriber run - a stop while a JetStream API request waits on a frozen broker', () => {
  it('stops within seconds while it ensures its stream and durable on a broker that froze right after the connect, and applies the event once later', async () => {
    await using server = await startNats();
    const stream = ownStream('SENS');
    const nc = await natsClient(server.url);
    await createStream(nc, stream);
    await publishEvents(nc, stream, [creditedEvent({ owner: 'ensure-owner', amountCents: 7 })]);
    await nc.close();
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });

    const frozen: { at?: number } = {};
    const stop = new AbortController();
    const running = testRunner(sdb, server.url, balances, stream, { connect: freezingConnect(server, /^\$JS\.API\./, frozen, 'freezing subscriber') }).run({
      signal: stop.signal,
      timeLimitMs: 60_000,
    });
    await eventually(() => frozen.at !== undefined, { what: 'the first JetStream API request' });
    await new Promise((r) => setTimeout(r, 200));
    const ms = await msToStop(() => (stop.abort(), running));
    server.resume();
    // less than the requests' own 5 s timeout: the stop does not wait for them
    expect(ms).toBeLessThan(4500);

    const again = new AbortController();
    const next = testRunner(sdb, server.url, balances, stream).run({ signal: again.signal, untilIdle: true, timeLimitMs: 30_000 });
    await next;
    expect((await readOwnerBalance(sdb.db, 'ensure-owner')).creditedCents).toBe(7);
  }, 60_000);

  it('leaves no abort listener on its caller signal after twenty runs until idle, each stopped by an idle check', async () => {
    await using server = await startNats();
    const stream = ownStream('SLIS');
    const nc = await natsClient(server.url);
    await createStream(nc, stream);
    await nc.close();
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    const warnings: string[] = [];
    const onWarning = (w: Error) => void warnings.push(`${w.name}: ${w.message}`);
    process.on('warning', onWarning);
    try {
      const caller = new AbortController();
      const runner = testRunner(sdb, server.url, balances, stream, { idleCheckMs: 50 });
      for (let i = 0; i < 20; i++) await runner.run({ signal: caller.signal, untilIdle: true, timeLimitMs: 20_000 });
      expect(getEventListeners(caller.signal, 'abort').length).toBe(0);
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings.filter((w) => /MaxListeners/.test(w))).toEqual([]);
  }, 60_000);

  it('leaves no timer and no socket behind once a run until idle stopped while its idle check waited on the frozen broker', async () => {
    await using server = await startNats();
    const stream = ownStream('SRES');
    const nc = await natsClient(server.url);
    await createStream(nc, stream);
    await publishEvents(nc, stream, [creditedEvent({ owner: 'res-owner', amountCents: 3 })]);
    await nc.close();
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    await new Promise((r) => setTimeout(r, 200));
    const before = activeHandles();

    const stop = new AbortController();
    const running = testRunner(sdb, server.url, balances, stream, { idleCheckMs: 2000 }).run({ signal: stop.signal, untilIdle: true, timeLimitMs: 50_000 });
    await eventually(async () => (await readOwnerBalance(sdb.db, 'res-owner')).creditedCents === 3, { what: 'the event applied' });
    await server.pause();
    await new Promise((r) => setTimeout(r, 4500)); // an idle check waits on the frozen broker
    stop.abort();
    await running;
    await new Promise((r) => setTimeout(r, 300));
    const after = activeHandles();
    server.resume();
    expect(after).toEqual(before);
  }, 60_000);
});
