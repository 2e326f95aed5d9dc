// A subscriber run stopped while its stream and consumer setup waits on a frozen broker abandons that setup. Once the
// broker answers again, what was abandoned must do no harm: no unhandled rejection, no timer or socket left, the
// durable (created late by the broker from the buffered request) with the runner's settings, and a later run that
// applies every event once, in aggregate order.
import { jetstreamManager } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { creditedEvent } from '../support/accounts.ts';
import { createSubscriberDb, testRunner } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import { balances, readOwnerBalance } from '../support/fixture/subscribers/balances/subscriber.ts';
import { activeHandles, freezingConnect, msToStop } from '../support/frozen-broker.ts';
import { natsClient, startNats } from '../support/nats.ts';
import { createStream, ownStream, publishEvents } from '../support/stream.ts';

describe('subscriber run - setup abandoned by a stop on a frozen broker', () => {
  for (const [step, freezeOn] of [
    ['the JetStream check', /^\$JS\.API\.INFO$/],
    ['the stream check', /^\$JS\.API\.STREAM\.INFO\./],
    ['the durable creation', /^\$JS\.API\.CONSUMER\.(DURABLE\.)?CREATE\./],
    ['the durable lookup after it was ensured', /^\$JS\.API\.CONSUMER\.INFO\./],
  ] as const) {
    it(`stopped during ${step}: no unhandled rejection, nothing left running, the durable as configured, and a later run applies each event once`, async () => {
      await using server = await startNats();
      const stream = ownStream('SABN');
      const nc = await natsClient(server.url);
      await createStream(nc, stream);
      const events = Array.from({ length: 10 }, (_, i) => creditedEvent({ owner: `abn-${i % 3}`, amountCents: i + 1 }));
      await publishEvents(nc, stream, events);
      await nc.close();
      await using sdb = await createSubscriberDb({ subscriber: 'balances' });
      const durable = 'abandoned-setup';
      const options = { durableName: durable, ackWaitMs: 3000 };

      const rejections: unknown[] = [];
      const onRejection = (reason: unknown) => void rejections.push(reason);
      process.on('unhandledRejection', onRejection);
      try {
        await new Promise((r) => setTimeout(r, 200));
        const before = activeHandles();
        // the lookup after the durable was ensured: only the second CONSUMER.INFO (ensureConsumer asks first)
        const frozen: { at?: number; armed?: boolean } = {};
        let infos = 0;
        const connect = freezingConnect(server, freezeOn, frozen, 'freezing subscriber');
        const counting = async () => {
          const c = await connect();
          const request = c.request.bind(c);
          c.request = ((subject: string, ...rest: unknown[]) => {
            if (step === 'the durable lookup after it was ensured' && /^\$JS\.API\.CONSUMER\.INFO\./.test(subject)) frozen.armed = ++infos >= 2;
            return (request as (...a: unknown[]) => Promise<unknown>)(subject, ...rest);
          }) as typeof c.request;
          return c;
        };
        if (step === 'the durable lookup after it was ensured') frozen.armed = false;
        const stop = new AbortController();
        const running = testRunner(sdb, server.url, balances, stream, { ...options, connect: counting }).run({ signal: stop.signal, timeLimitMs: 60_000 });
        await eventually(() => frozen.at !== undefined, { what: `the frozen broker reached at ${step}` });
        await new Promise((r) => setTimeout(r, 200));
        const ms = await msToStop(() => (stop.abort(), running));
        expect(ms).toBeLessThan(4500);
        server.resume();
        // the broker works through what it had buffered; the abandoned requests' answers (or failures) come in now
        await new Promise((r) => setTimeout(r, 2500));
        const after = activeHandles();
        expect(after).toEqual(before);

        const check = await natsClient(server.url);
        const info = await (await jetstreamManager(check)).consumers.info(stream.name, durable).catch(() => null);
        await check.close();
        if (info) expect({ ackWait: info.config.ack_wait, durable: info.config.durable_name }).toEqual({ ackWait: 3000 * 1_000_000, durable });

        await testRunner(sdb, server.url, balances, stream, options).run({ untilIdle: true, timeLimitMs: 30_000 });
        for (let o = 0; o < 3; o++) {
          const want = events.filter((e) => e.data.owner === `abn-${o}`).reduce((n, e) => n + e.data.amountCents, 0);
          expect((await readOwnerBalance(sdb.db, `abn-${o}`)).creditedCents, `abn-${o}`).toBe(want);
        }
        await new Promise((r) => setTimeout(r, 100));
      } finally {
        server.resume();
        process.off('unhandledRejection', onRejection);
      }
      expect(rejections.map(String)).toEqual([]);
    }, 60_000);
  }
});
