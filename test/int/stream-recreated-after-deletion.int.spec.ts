import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { describe, expect, it } from 'vitest';
import { ensureStream, STREAM_RECREATE_SETTLE_MS } from '../../src/nats/ensure-stream.ts';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { accountCommands, creditedEvent } from '../support/accounts.ts';
import { createSubscriberDb, testRunner } from '../support/consumer.ts';
import { countRows, createTestDb, MARKED_SENT } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { balances, readOwnerBalance } from '../support/fixture/subscribers/balances/subscriber.ts';
import { relayDeps, runRelay } from '../support/relay.ts';
import { ownStream, publishEvents, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

// nats-server 2.9 takes a stream out of its account before it has removed the stream's store: a stream created again
// in that window under the same name loses its store to the finishing deletion, and then refuses publishes or takes
// them and never delivers them. A large store widens the window to the tens of ms a runner needs to notice the
// deletion and create the stream again: without the wait, one such round of the runner test below failed in two runs of
// three, and the relay test in two runs of four (the stream it had created again refused the next writes: "Error
// creating msg block file … no such file or directory").
const nats = useNats();

/** Stores ≈ 160 MB in `stream` outside any subscriber's subjects: a store whose deletion takes a while. */
async function fillStore(nc: NatsConnection, stream: StreamSettings): Promise<void> {
  const js = jetstream(nc);
  const filler = new Uint8Array(8192);
  for (let chunk = 0; chunk < 20; chunk++) await Promise.all(Array.from({ length: 1000 }, (_, k) => js.publish(`${stream.prefix}.filler.${k % 50}`, filler)));
}

describe('a stream deleted by an operator, created again', () => {
  it('ensureStream told the stream was in use waits before creating it again, and takes one created meanwhile as it is', async () => {
    const jsm = await jetstreamManager(nats().nc);
    // missing, settle asked: created only after the wait
    const gone = ownStream('REDO');
    let startedAt = Date.now();
    const created = await ensureStream(jsm, gone, undefined, { settleMs: STREAM_RECREATE_SETTLE_MS });
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(STREAM_RECREATE_SETTLE_MS - 50);
    expect(Date.parse(created.created)).toBeGreaterThanOrEqual(startedAt + STREAM_RECREATE_SETTLE_MS - 50);
    // created by someone else during the wait: that stream is kept, not replaced
    const other = ownStream('REDO');
    startedAt = Date.now();
    const ensuring = ensureStream(jsm, other, undefined, { settleMs: STREAM_RECREATE_SETTLE_MS });
    await new Promise((r) => setTimeout(r, 200));
    const theirs = await ensureStream(jsm, other);
    expect((await ensuring).created).toBe(theirs.created);
    // missing, no settle (a first start): created at once
    startedAt = Date.now();
    await ensureStream(jsm, ownStream('REDO'));
    expect(Date.now() - startedAt).toBeLessThan(STREAM_RECREATE_SETTLE_MS - 200);
  });

  it('a runner whose stream (with a large store) an operator deletes, twice, applies each event published once it exists again', async () => {
    const stream = ownStream('BIGGONE');
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    const jsm = await jetstreamManager(nats().nc);
    const exists = async () =>
      jsm.consumers.info(stream.name, 'balances').then(
        () => true,
        () => false,
      );
    const stop = new AbortController();
    const running = testRunner(sdb, nats().url, balances, stream).run({ signal: stop.signal, timeLimitMs: 90_000 });
    await eventually(exists, { what: 'the stream and the consumer' });
    await publishEvents(nats().nc, stream, [creditedEvent({ owner: 'big-owner', amountCents: 1 })]);
    await eventually(async () => (await readOwnerBalance(sdb.db, 'big-owner')).creditedCents === 1, { what: 'the first event applied' });
    // each round: a store to delete, the deletion, the event published once the runner has the stream again
    for (const [round, cents, total] of [
      [1, 2, 3],
      [2, 4, 7],
    ] as const) {
      await fillStore(nats().nc, stream);
      await jsm.streams.delete(stream.name);
      await eventually(exists, { what: `the stream and the consumer created again (round ${round})`, timeoutMs: 30_000 });
      await publishEvents(nats().nc, stream, [creditedEvent({ owner: 'big-owner', amountCents: cents })]);
      await eventually(async () => (await readOwnerBalance(sdb.db, 'big-owner')).creditedCents === total, { what: `the event of round ${round} applied` });
    }
    stop.abort();
    const summary = await running;
    expect(summary.brokerErrors).toBeGreaterThanOrEqual(2);
  });

  it('a relay publishing while an operator deletes its stream (with a large store), three times, gets every event written after each deletion into the stream it creates again', async () => {
    const stream = ownStream('RELAYGONE');
    await using t = await createTestDb();
    const nc = nats().nc;
    const jsm = await jetstreamManager(nc);
    // back-offs of a few ms: the relay tries the broker again, and creates the stream, at once
    const { stop } = runRelay(relayDeps(t, nats().url, { stream, pollMs: 2, settings: { backoffBaseMs: 1, maxBackoffMs: 5, publishTimeoutMs: 2000 } }));
    const accounts = accountCommands(t.deps);
    await accounts.open();
    const allMarked = async () => (await countRows(t.client, 'outbox', MARKED_SENT)) === (await countRows(t.client, 'outbox'));
    await eventually(allMarked, { what: 'the first event sent' });
    for (const round of [1, 2, 3]) {
      await fillStore(nc, stream);
      // commands keep coming, so the relay is publishing when the stream goes
      let writing = true;
      const writer = (async () => {
        while (writing) {
          await accounts.open();
          await new Promise((r) => setTimeout(r, 2));
        }
      })();
      await new Promise((r) => setTimeout(r, 100));
      await jsm.streams.delete(stream.name);
      const lastBefore = Number((await t.client.execute('SELECT max(seq) FROM outbox')).rows[0]![0]);
      await new Promise((r) => setTimeout(r, 500));
      writing = false;
      await writer;
      await eventually(allMarked, { what: `every row marked sent (round ${round})`, timeoutMs: 30_000 });
      // rows written after the deletion returned can only have gone to the stream created again, and all must be there
      const written = (await t.client.execute({ sql: 'SELECT id FROM outbox WHERE seq > ? ORDER BY seq', args: [lastBefore] })).rows.map((r) => String(r.id));
      expect(written.length).toBeGreaterThan(10);
      const inStream = new Set((await readStream(nc, stream)).map((e) => e.event.eventId));
      expect(written.filter((id) => !inStream.has(id))).toEqual([]);
    }
    const summary = await stop();
    expect(summary.brokerErrors).toBeGreaterThanOrEqual(2);
  });
});
