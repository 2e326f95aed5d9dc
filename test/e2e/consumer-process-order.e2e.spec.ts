import { createClient } from '@libsql/client';
import { jetstreamManager } from '@nats-io/jetstream';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { placedEvent, publishRaw } from '../support/consumer.ts';
import { createTempDir } from '../support/db.ts';
import { startNats } from '../support/nats.ts';
import { runtimeCommand, spawnChild, type ChildHandle } from '../support/process.ts';
import { natsClient, TEST_STREAM } from '../support/relay.ts';
import { eventually } from '../support/service.ts';
import { startWriteLockHolder } from '../support/write-lock.ts';

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

describe('subscriber process - order across a crash', () => {
  it('a subscriber SIGKILLed while it holds events of an aggregate (its database write-locked): the next process applies them before the later event of that aggregate', async () => {
    const nats = await startNats();
    const tmp = createTempDir();
    cleanups.push(() => tmp[Symbol.dispose](), () => nats[Symbol.asyncDispose]());
    const reportingUrl = `file:${join(tmp.dir, 'reporting.db')}`;
    const env = {
      DATABASE_URL: `file:${join(tmp.dir, 'app.db')}`,
      CONSUMER_DATABASE_URL_TEMPLATE: `file:${join(tmp.dir, '{name}.db')}`,
      NATS_URL: nats.url,
      LOG_LEVEL: 'error',
      // long enough that the next process is up well before the dead one's messages are redelivered
      CONSUMER_ACK_WAIT_MS: '5000',
      DATABASE_BUSY_TIMEOUT_MS: '200',
      RELAY_BACKOFF_BASE_MS: '100',
      RELAY_MAX_BACKOFF_MS: '10000',
    };
    const consumer = (): ChildHandle => {
      const { cmd, args } = runtimeCommand('node', 'src/entry/consume.ts');
      const child = spawnChild(cmd, [...args, 'reporting'], env);
      cleanups.push(() => child.kill9());
      return child;
    };
    const nc = await natsClient(nats.url);
    cleanups.push(() => nc.close());
    const jsm = await jetstreamManager(nc);
    const info = () => jsm.consumers.info(TEST_STREAM.name, 'reporting');

    const first = consumer();
    expect(await eventually(async () => info().then(() => true, () => false), 30_000)).toBe(true);
    const holder = await startWriteLockHolder(reportingUrl);
    cleanups.push(() => holder[Symbol.asyncDispose]());
    await holder.lock();
    const orderId = `held-order-${process.pid}`;
    const [a1, a2, a3] = [1, 2, 3].map(() => placedEvent({ customerId: 'held-cust', orderId }));
    const b1 = placedEvent({ customerId: 'other-cust' });
    for (const e of [a1!, a2!, b1]) await publishRaw(nc, TEST_STREAM, e, e.eventId);
    expect(await eventually(async () => (await info()).num_ack_pending === 3, 10_000)).toBe(true);

    await first.kill9(); // a1, a2 and b1 stay unacknowledged until their ack_wait runs out
    await publishRaw(nc, TEST_STREAM, a3!, a3!.eventId);
    await holder.release();
    const second = consumer();

    const reporting = createClient({ url: reportingUrl });
    cleanups.push(() => reporting.close());
    const applied = async () => (await reporting.execute('SELECT event_id FROM inbox ORDER BY rowid')).rows.map((r) => String(r.event_id));
    expect(await eventually(async () => (await applied()).length === 4, 30_000)).toBe(true);
    expect((await applied()).filter((id) => id !== b1.eventId)).toEqual([a1!, a2!, a3!].map((e) => e.eventId));
    expect(await eventually(async () => (await info()).num_ack_pending === 0, 10_000)).toBe(true);
    expect((await second.stop('SIGTERM')).code).toBe(0);
  });
});
