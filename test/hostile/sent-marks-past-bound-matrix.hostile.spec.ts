// The in-place marks past the recorded-marks bound (markSent's `later`), for small bounds and batch sizes,
// forged or stale entries filling the table, and a restore between the publish and an in-place mark.
import { describe, expect, it } from 'vitest';
import { createAckPublisher } from '../../src/nats/ack-publisher.ts';
import { readOutboxStats } from '../../src/outbox/outbox-stats.ts';
import { relayPass } from '../../src/outbox/relay-pass.ts';
import { accountCommands } from '../support/accounts.ts';
import { countRows, createTestDb, MARKED_SENT, type TestDb } from '../support/db.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { freshStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';
import { outboxOrder, streamOrder } from '../support/aggregate-order.ts';

const nats = useNats();

/** peak: most entries outbox_sent held at any insert; recorded: entries ever inserted. */
async function watch(t: TestDb) {
  await t.client.executeMultiple(`
    CREATE TABLE entries_watch (peak INTEGER, recorded INTEGER); INSERT INTO entries_watch VALUES (0, 0);
    CREATE TRIGGER watch_inserts AFTER INSERT ON outbox_sent BEGIN
      UPDATE entries_watch SET peak = max(peak, (SELECT count(*) FROM outbox_sent)), recorded = recorded + 1;
    END;`);
  return async () => {
    const r = (await t.client.execute('SELECT peak, recorded FROM entries_watch')).rows[0]!;
    return { peak: Number(r.peak), recorded: Number(r.recorded) };
  };
}

describe('in-place marks past the recorded-marks bound', () => {
  const cases: Array<[number, number]> = [];
  for (const bound of [1, 2, 5]) for (const batch of [1, 3, 7]) cases.push([bound, batch]);

  it.each(cases)(
    'bound %i, batch %i: every event once, in aggregate order, all sent, no entry left, table bounded',
    { timeout: 60_000 },
    async (bound, batch) => {
      await using t = await createTestDb();
      const accounts = accountCommands(t.deps);
      const ids = await accounts.openMany(25);
      for (let round = 0; round < 3; round++) await Promise.all(ids.map((id) => accounts.deposit(id, 100 + round)));
      // a few re-queued rows (due now) in the middle: their marks must go in place whatever the bound, and move the epoch
      await t.client.execute('UPDATE outbox SET attempts = 1, available_at = 0 WHERE seq IN (SELECT seq FROM outbox ORDER BY seq LIMIT 3 OFFSET 20)');
      await t.client.execute('UPDATE outbox SET attempts = 2, available_at = 0 WHERE seq IN (SELECT seq FROM outbox ORDER BY seq LIMIT 2 OFFSET 61)');
      const total = await countRows(t.client, 'outbox');
      const watched = await watch(t);
      const stream = await freshStream(nats().nc, `BOUND${bound}BATCH${batch}`);
      const summary = await drainOutbox(relayDeps(t, nats().url, { stream, settings: { batch }, recordedMarksMax: bound }));

      expect({ published: summary.published, duplicates: summary.duplicates, failed: summary.failed }).toEqual({ published: total, duplicates: 0, failed: 0 });
      const msgs = await readStream(nats().nc, stream);
      const seen = msgs.map((m) => m.headers['Nats-Msg-Id']);
      expect(new Set(seen).size).toBe(seen.length);
      expect(seen.length).toBe(total);
      expect(streamOrder(msgs)).toEqual(await outboxOrder(t));
      expect(await countRows(t.client, 'outbox', "status = 'sent'")).toBe(total);
      expect(await countRows(t.client, 'outbox_sent')).toBe(0);
      const { peak, recorded } = await watched();
      // one pass reads at most four batches before its marks are written
      expect(peak).toBeLessThanOrEqual(bound - 1 + 4 * batch);
      // the in-place path past the bound was taken: far fewer recorded than published
      expect(recorded).toBeLessThan(total);
      expect(await readOutboxStats(t.deps.db, new Date())).toMatchObject({ pending: 0, failed: 0, sent: total, oldestPendingAgeMs: 0 });
    },
  );

  it('forged / stale entries filling the table past the bound (no row, another id, a row already sent): every row still published once and marked, the junk folded away', async () => {
    await using t = await createTestDb();
    await accountCommands(t.deps).openMany(40);
    const rows = (await t.client.execute('SELECT seq, id FROM outbox ORDER BY seq')).rows.map((r) => ({ seq: Number(r.seq), id: String(r.id) }));
    // entries for seqs no row has, entries naming another event than the row holds (a restore replaced it)
    for (let i = 0; i < 5; i++)
      await t.client.execute({ sql: 'INSERT INTO outbox_sent (seq, id, sent_at) VALUES (?, ?, 1)', args: [1_000_000 + i, `ghost-${i}`] });
    for (const r of rows.slice(0, 4))
      await t.client.execute({ sql: 'INSERT INTO outbox_sent (seq, id, sent_at) VALUES (?, ?, 1)', args: [r.seq, `${r.id}-old`] });
    expect(await countRows(t.client, 'outbox_sent')).toBe(9);
    const stream = await freshStream(nats().nc, 'STALEENTRIES');
    const summary = await drainOutbox(relayDeps(t, nats().url, { stream, settings: { batch: 4 }, recordedMarksMax: 3 }));
    expect({ published: summary.published, duplicates: summary.duplicates }).toEqual({ published: 40, duplicates: 0 });
    expect((await readStream(nats().nc, stream)).map((m) => m.headers['Nats-Msg-Id'])).toEqual(rows.map((r) => r.id));
    expect(await countRows(t.client, 'outbox', "status = 'sent'")).toBe(40);
    expect(await countRows(t.client, 'outbox_sent')).toBe(0);
  });

  it('a row stored again under its seq with another event between its publish and an in-place mark (table at the bound): left pending, then published', async () => {
    await using t = await createTestDb();
    await accountCommands(t.deps).openMany(9);
    const stream = await freshStream(nats().nc, 'RESTOREDINPLACE');
    const rows = (await t.client.execute('SELECT seq, id FROM outbox ORDER BY seq')).rows.map((r) => ({ seq: Number(r.seq), id: String(r.id) }));
    const pub = createAckPublisher(nats().nc, 5000);
    const plain = relayDeps(t, nats().url, { stream, settings: { batch: 3 } });
    // the first full pass records three entries: the table is at the bound (2) from there on
    expect(await relayPass(plain, pub, { markLater: 2 })).toMatchObject({ published: 3, more: true });
    expect(await countRows(t.client, 'outbox_sent')).toBe(3);
    const replaced = rows[4]!;
    const newId = crypto.randomUUID();
    const swapping = relayDeps(t, nats().url, {
      stream,
      settings: { batch: 3 },
      faults: {
        afterPubAcks: async () => {
          await t.client.execute({
            sql: `INSERT OR REPLACE INTO outbox (seq, id, aggregate_type, aggregate_id, message_type, payload, headers, status, attempts, occurred_at, available_at, aggregate_hash, partition, payload_validated)
                  SELECT seq, ?1, aggregate_type, aggregate_id, message_type, replace(payload, id, ?1), headers, 'pending', 0, occurred_at, available_at, aggregate_hash, partition, 0
                  FROM outbox WHERE seq = ?2`,
            args: [newId, replaced.seq],
          });
        },
      },
    });
    const second = await relayPass(swapping, pub, { markLater: 2, floor: { seq: rows[2]!.seq, epoch: null } });
    expect(second).toMatchObject({ published: 3, more: true });
    // marked in place, no new entry; the replaced row stays pending under its new id
    expect(await countRows(t.client, 'outbox_sent')).toBe(3);
    expect(await countRows(t.client, 'outbox', "status = 'sent'")).toBe(2);
    const stored = (await t.client.execute({ sql: 'SELECT id, status FROM outbox WHERE seq = ?', args: [replaced.seq] })).rows[0]!;
    expect({ id: String(stored.id), status: String(stored.status) }).toEqual({ id: newId, status: 'pending' });
    expect(await countRows(t.client, 'outbox', MARKED_SENT)).toBe(5);

    const rest = await drainOutbox(relayDeps(t, nats().url, { stream, settings: { batch: 3 }, recordedMarksMax: 2 }));
    expect({ published: rest.published, duplicates: rest.duplicates }).toEqual({ published: 4, duplicates: 0 });
    const seen = (await readStream(nats().nc, stream)).map((m) => m.headers['Nats-Msg-Id']);
    expect(seen).toEqual([...rows.slice(0, 6).map((r) => r.id), newId, ...rows.slice(6).map((r) => r.id)]);
    expect(new Set(seen)).toEqual(new Set([...rows.map((r) => r.id), newId]));
    expect(await countRows(t.client, 'outbox', "status = 'sent'")).toBe(9);
    expect(await countRows(t.client, 'outbox_sent')).toBe(0);
  });
});
