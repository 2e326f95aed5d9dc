// Scripts and operators acting on a half-drained outbox whose marks are split between recorded entries
// (below the bound) and in-place marks (past it): re-queue, park by hand, restore under the same seq, renumber, compact.
import { describe, expect, it } from 'vitest';
import { compactOutbox } from '../../src/outbox/compact-outbox.ts';
import { requeueFailed } from '../../src/outbox/failed-rows.ts';
import { readOutboxStats } from '../../src/outbox/outbox-stats.ts';
import { accountCommands } from '../support/accounts.ts';
import { countRows, createTestDb, MARKED_SENT, type TestDb } from '../support/db.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { freshStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

type Row = { seq: number; id: string; status: string; entry: boolean; aggregate: string };
async function rowsOf(t: TestDb): Promise<Row[]> {
  const res = await t.client.execute(
    'SELECT seq, id, status, aggregate_id, EXISTS (SELECT 1 FROM outbox_sent s WHERE s.seq = outbox.seq AND s.id = outbox.id) AS entry FROM outbox ORDER BY seq',
  );
  return res.rows.map((r) => ({
    seq: Number(r.seq),
    id: String(r.id),
    status: String(r.status),
    entry: Number(r.entry) === 1,
    aggregate: String(r.aggregate_id),
  }));
}

const REPLACE_SQL = `INSERT OR REPLACE INTO outbox (seq, id, aggregate_type, aggregate_id, message_type, payload, headers, status, attempts, occurred_at, available_at, aggregate_hash, partition, payload_validated)
  SELECT seq, ?1, aggregate_type, aggregate_id, message_type, replace(payload, id, ?1), headers, 'pending', 0, occurred_at, available_at, aggregate_hash, partition, 0
  FROM outbox WHERE seq = ?2`;

/** A backlog drained part-way by a relay with bound `bound`: some rows recorded, some marked in place, some pending. */
async function halfDrained(tag: string, bound: number) {
  const t = await createTestDb();
  const accounts = accountCommands(t.deps);
  const ids = await accounts.openMany(30);
  await Promise.all(ids.map((id) => accounts.deposit(id, 100)));
  const stream = await freshStream(nats().nc, tag);
  const deps = relayDeps(t, nats().url, { stream, settings: { batch: 4 }, recordedMarksMax: bound });
  // stopped (as by SIGTERM) in the pass that reached 30 acknowledgements: its marks are written, none is folded (a run
  // bounded by --max-messages would fold them before it ends)
  const stop = new AbortController();
  let acked = 0;
  const afterPubAcks = (rows: readonly unknown[]) => {
    acked += rows.length;
    if (acked >= 30) stop.abort();
  };
  await createRelay({ ...deps, faults: { afterPubAcks } }).run({ signal: stop.signal, timeLimitMs: 30_000 });
  return { t, stream, deps };
}

describe('scripts against marks split between entries and in-place marks', () => {
  it('re-queue of an in-place row, hand-park of a recorded row, restores of both kinds, a renumbered recorded row: each write means what it says', {
    timeout: 60_000,
  }, async () => {
    const { t, stream, deps } = await halfDrained('SCRIPTED', 3);
    await using _ = t;
    const before = await rowsOf(t);
    const recorded = before.filter((r) => r.status === 'pending' && r.entry);
    const inPlace = before.filter((r) => r.status === 'sent');
    const pending = before.filter((r) => r.status === 'pending' && !r.entry);
    expect(recorded.length).toBeGreaterThanOrEqual(5);
    expect(inPlace.length).toBeGreaterThanOrEqual(3);
    expect(pending.length).toBeGreaterThan(0);

    const requeued = inPlace[0]!; // a script asks for it to be published again
    const handParked = recorded[0]!; // an operator parks a published row by hand (as the relay would: attempts spent)
    const restoredRecorded = recorded[1]!; // a restore stores another event under its seq
    const restoredInPlace = inPlace[1]!;
    const renumbered = recorded[2]!; // a script renumbers it
    await t.client.execute({ sql: "UPDATE outbox SET status = 'pending' WHERE seq = ?", args: [requeued.seq] });
    await t.client.execute({ sql: "UPDATE outbox SET status = 'failed', attempts = 5, last_error = 'by hand' WHERE seq = ?", args: [handParked.seq] });
    const newRecorded = crypto.randomUUID();
    const newInPlace = crypto.randomUUID();
    await t.client.execute({ sql: REPLACE_SQL, args: [newRecorded, restoredRecorded.seq] });
    await t.client.execute({ sql: REPLACE_SQL, args: [newInPlace, restoredInPlace.seq] });
    const maxSeq = before.at(-1)!.seq;
    await t.client.execute({ sql: 'UPDATE outbox SET seq = ? WHERE seq = ?', args: [maxSeq + 1000, renumbered.seq] });
    // its entry went along: still counted as sent
    expect(await countRows(t.client, 'outbox', `seq = ${maxSeq + 1000} AND ${MARKED_SENT}`)).toBe(1);

    const s1 = await drainOutbox({ ...deps, recordedMarksMax: 1 });
    // the not-yet-published rows, the two restored events; the re-queued row comes back as a duplicate
    expect({ published: s1.published, duplicates: s1.duplicates }).toEqual({ published: pending.length + 2, duplicates: 1 });
    expect(await countRows(t.client, 'outbox', "status = 'failed'")).toBe(1);
    expect(await countRows(t.client, 'outbox_sent')).toBe(0);
    // the hand-parked row stays parked, not published again until re-queued
    expect((await t.client.execute({ sql: 'SELECT status FROM outbox WHERE seq = ?', args: [handParked.seq] })).rows[0]!.status).toBe('failed');

    expect(await t.deps.writer.write((tx) => requeueFailed(tx, undefined))).toBe(1);
    const s2 = await drainOutbox({ ...deps, recordedMarksMax: 1 });
    expect({ published: s2.published, duplicates: s2.duplicates }).toEqual({ published: 0, duplicates: 1 });

    const seen = (await readStream(nats().nc, stream)).map((m) => m.headers['Nats-Msg-Id']);
    expect(new Set(seen).size).toBe(seen.length);
    expect(new Set(seen)).toEqual(new Set([...before.map((r) => r.id), newRecorded, newInPlace]));
    expect(await countRows(t.client, 'outbox', "status = 'sent'")).toBe(before.length);
    expect(await countRows(t.client, 'outbox_sent')).toBe(0);
    expect(await readOutboxStats(t.deps.db, new Date())).toMatchObject({ pending: 0, failed: 0, sent: before.length, oldestPendingAgeMs: 0 });
  });

  it('compaction of a half-drained outbox deletes only the in-place rows; the recorded ones wait for their fold, none published again', async () => {
    const { t, stream, deps } = await halfDrained('COMPACTED', 2);
    await using _ = t;
    const before = await rowsOf(t);
    const total = before.length;
    const inPlace = before.filter((r) => r.status === 'sent').length;
    const recordedN = before.filter((r) => r.entry).length;
    expect(inPlace).toBeGreaterThan(0);
    expect(recordedN).toBeGreaterThan(0);
    const cut = Date.now() + 60_000;
    const c1 = await compactOutbox({ writer: t.deps.writer, clock: () => new Date(cut + 120_000) }, { cutoffMs: cut, batch: 3 });
    expect(c1.deleted).toBe(inPlace);
    expect(await countRows(t.client, 'outbox', MARKED_SENT)).toBe(recordedN);

    const s = await drainOutbox({ ...deps, recordedMarksMax: 1 });
    expect({ published: s.published, duplicates: s.duplicates }).toEqual({ published: total - inPlace - recordedN, duplicates: 0 });
    expect(await countRows(t.client, 'outbox_sent')).toBe(0);
    const c2 = await compactOutbox({ writer: t.deps.writer, clock: () => new Date(cut + 120_000) }, { cutoffMs: cut, batch: 3 });
    expect(c2.deleted).toBe(total - inPlace);
    const seen = (await readStream(nats().nc, stream)).map((m) => m.headers['Nats-Msg-Id']);
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen.length).toBe(total);
  });
});
