import { describe, expect, it } from 'vitest';
import { insertInboxRow } from '../../src/inbox/inbox-store.ts';
import {
  assertSafeRetention,
  compactInbox,
  compactInboxPeriodically,
  DEFAULT_INBOX_RETENTION_MS,
  minimumRetentionMs,
  UnsafeRetentionError,
} from '../../src/inbox/retention.ts';
import { silentLogger } from '../../src/logger.ts';
import { createSubscriberDb, type SubscriberDb } from '../support/consumer.ts';
import { countRows } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';

const DAY = 24 * 3600 * 1000;
const NOW = Date.parse('2026-06-01T00:00:00.000Z');

async function inboxWith(rows: Array<{ id: string; ageDays: number }>): Promise<SubscriberDb> {
  const sdb = await createSubscriberDb();
  await sdb.writer.write(async (tx) => {
    for (const r of rows) {
      await insertInboxRow(tx, { eventId: r.id, consumer: 'audit', messageType: 'account.opened.v1', receivedAt: NOW - r.ageDays * DAY });
    }
  });
  return sdb;
}

describe('inbox - retention', () => {
  it('compaction deletes only rows older than the cutoff, a bounded batch per transaction', async () => {
    const old = Array.from({ length: 7 }, (_, i) => ({ id: `old-${i}`, ageDays: 31 + i }));
    const recent = Array.from({ length: 4 }, (_, i) => ({ id: `recent-${i}`, ageDays: i * 7 }));
    await using sdb = await inboxWith([...recent, ...old]);

    const result = await compactInbox({ writer: sdb.writer, clock: () => new Date(NOW) }, { olderThanMs: 30 * DAY, batch: 3 });

    expect(result).toEqual({ deleted: 7, batches: 3, cutoff: NOW - 30 * DAY });
    const left = await sdb.client.execute('SELECT event_id FROM inbox ORDER BY event_id');
    expect(left.rows.map((r) => r.event_id)).toEqual(recent.map((r) => r.id));

    const again = await compactInbox({ writer: sdb.writer, clock: () => new Date(NOW) }, { olderThanMs: 30 * DAY, batch: 3 });
    expect(again).toMatchObject({ deleted: 0, batches: 0 });
    expect(await countRows(sdb.client, 'inbox')).toBe(4);
  });

  it('the consumers role compacts the inbox on its own, on every tick, until stopped', async () => {
    await using sdb = await inboxWith([
      { id: 'old', ageDays: 40 },
      { id: 'new', ageDays: 1 },
    ]);
    const stop = new AbortController();
    const running = compactInboxPeriodically({ writer: sdb.writer, clock: () => new Date(NOW), log: silentLogger, name: 'audit' }, 30 * DAY, stop.signal, {
      firstAfterMs: 20,
      everyMs: 20,
    });
    await eventually(async () => (await countRows(sdb.client, 'inbox')) === 1, { timeoutMs: 5000, everyMs: 10, what: 'the old row compacted' });
    stop.abort();
    await running;
    const left = await sdb.client.execute('SELECT event_id FROM inbox');
    expect(left.rows.map((r) => r.event_id)).toEqual(['new']);
  });

  it('compaction leaves dead letters alone', async () => {
    await using sdb = await inboxWith([{ id: 'old', ageDays: 90 }]);
    await sdb.client.execute({
      sql: `INSERT INTO dead_letters (event_id, consumer, subject, payload, error, deliveries, dead_at) VALUES ('dl', 'audit', 's', '{}', 'e', 1, ?)`,
      args: [NOW - 90 * DAY],
    });
    await compactInbox({ writer: sdb.writer, clock: () => new Date(NOW) }, { olderThanMs: 30 * DAY });
    expect(await countRows(sdb.client, 'inbox')).toBe(0);
    expect(await countRows(sdb.client, 'dead_letters')).toBe(1);
  });

  it('compaction finds old rows through the received_at index', async () => {
    await using sdb = await inboxWith([]);
    const plan = await sdb.client.execute({
      sql: 'EXPLAIN QUERY PLAN DELETE FROM inbox WHERE rowid IN (SELECT rowid FROM inbox WHERE received_at < ? ORDER BY received_at LIMIT ?)',
      args: [NOW, 10],
    });
    expect(plan.rows.map((r) => String(r.detail)).join('\n')).toMatch(/USING (COVERING )?INDEX idx_inbox_received_at/);
  });

  it('refuses a retention shorter than the duplicate window plus the redelivery horizon, naming both numbers', () => {
    const settings = { duplicateWindowMs: 10 * 60_000, maxDeliver: 10, ackWaitMs: 30_000, maxBackoffMs: 30_000 };
    const minimum = minimumRetentionMs(settings);
    expect(minimum).toBe(600_000 + 10 * (30_000 + 30_000));

    expect(() => assertSafeRetention({ ...settings, retentionMs: minimum - 1 })).toThrow(UnsafeRetentionError);
    expect(() => assertSafeRetention({ ...settings, retentionMs: 900_000 })).toThrow(
      /retention of 900000 ms: it must be at least 1200000 ms.*duplicate window \(600000 ms\).*max_deliver 10 × \(ack_wait 30000 ms \+ max back-off 30000 ms\)/,
    );
    expect(() => assertSafeRetention({ ...settings, retentionMs: minimum })).not.toThrow();
    expect(() => assertSafeRetention({ ...settings, retentionMs: DEFAULT_INBOX_RETENTION_MS })).not.toThrow();
  });
});
