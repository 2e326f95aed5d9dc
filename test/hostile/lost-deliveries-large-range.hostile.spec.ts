import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import type { Subscriber } from '../../src/inbox/subscriber.ts';
import { creditedEvent, openedEvent, testSubscriber } from '../support/accounts.ts';
import { createSubscriberDb, testRunner, type SubscriberDb } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import { natsClient } from '../support/nats.ts';
import { freshStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';
import { publishTogether } from '../support/recording-subscriber.ts';

// One message unacknowledged at the ack floor (taken by another puller that never answers) while the rest flow moves
// the floor no further: a check at the next start reads every message between the floor and the last delivery
// (20 000 here) and must let the other aggregates go on at once, holding back only the missing message's aggregate.

const nats = useNats();
const count = (sdb: SubscriberDb) => sdb.client.execute('SELECT count(*) AS n FROM applied').then((r) => Number(r.rows[0]!.n));

describe('lost deliveries - a long way between the ack floor and the last delivery', () => {
  it('applies a new event of another aggregate at once after a restart while the one unacknowledged message lies 20 000 applied ones below', async () => {
    const stream = await freshStream(nats().nc, 'WIDE');
    await using sdb = await createSubscriberDb();
    await sdb.client.execute('CREATE TABLE applied (n INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL)');
    const jsm = await jetstreamManager(nats().nc);
    const info = () => jsm.consumers.info(stream.name, 'wide');
    const appliedIds = async () => new Set((await sdb.client.execute('SELECT event_id FROM applied')).rows.map((r) => String(r.event_id)));
    const stuck = openedEvent({ accountId: `wide-stuck-${process.pid}` });
    const subscriber: Subscriber = testSubscriber('wide', async (tx, event) => {
      await tx.run(sql`INSERT INTO applied (event_id) VALUES (${event.eventId})`);
    });
    // the stolen message comes back after 30 s, well after this test's runs
    const settings = { ackWaitMs: 30_000, batch: 500, pullExpiresMs: 1000 };

    let pulling = false;
    const stop1 = new AbortController();
    const first = testRunner(sdb, nats().url, subscriber, stream, settings).run({
      signal: stop1.signal,
      timeLimitMs: 50_000,
      lease: { mayPull: () => pulling, holds: () => true },
    });
    await eventually(async () => (await info().catch(() => undefined))?.num_waiting === 0, { what: 'the durable, with no pull request out' });
    await publishTogether(nats().nc, stream.prefix, [stuck]);
    const thief = await natsClient(nats().url);
    try {
      const stolen = await (await jetstream(thief).consumers.get(stream.name, 'wide')).next({ expires: 2000 });
      expect(stolen?.headers?.get('Nats-Msg-Id')).toBe(stuck.eventId);
      pulling = true;
      const rest = Array.from({ length: 20_000 }, (_, i) => openedEvent({ accountId: `wide-${i % 200}-${Math.floor(i / 200)}-${process.pid}` }));
      await publishTogether(nats().nc, stream.prefix, rest);
      await eventually(async () => (await count(sdb)) === rest.length, { timeoutMs: 40_000, everyMs: 200, what: 'every other event applied' });
      // each message is acknowledged after its write committed: the last acknowledgements may still be on their way
      await eventually(async () => (await info()).num_ack_pending === 1, { what: 'every applied message acknowledged' });
      expect(await info()).toMatchObject({ num_ack_pending: 1, ack_floor: { stream_seq: 0 } });
      stop1.abort();
      await first;

      // the next run (a deploy) starts with that one message unacknowledged, 20 000 sequences below the last delivery
      const stop2 = new AbortController();
      const second = testRunner(sdb, nats().url, subscriber, stream, settings).run({ signal: stop2.signal, timeLimitMs: 50_000 });
      const other = creditedEvent({ accountId: `wide-0-0-${process.pid}`, version: 2 });
      await publishTogether(nats().nc, stream.prefix, [other]);
      await eventually(async () => (await appliedIds()).has(other.eventId), { timeoutMs: 30_000, what: 'the new event applied' });
      // the stuck message is still with the other puller: the new event did not wait for it
      expect((await appliedIds()).has(stuck.eventId)).toBe(false);
      await eventually(async () => (await info()).num_ack_pending === 1, { what: 'the new event acknowledged, the stuck one not' });
      stop2.abort();
      await second;
    } finally {
      await thief.close();
    }
  }, 90_000);
});
