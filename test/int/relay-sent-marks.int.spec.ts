import { describe, expect, it } from 'vitest';
import { createAckPublisher } from '../../src/nats/ack-publisher.ts';
import { applyPartitionCount } from '../../src/outbox/outbox-partitions.ts';
import { readOutboxStats } from '../../src/outbox/outbox-stats.ts';
import { relayPass } from '../../src/outbox/relay-pass.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { foldSentMarks } from '../../src/outbox/relay-store.ts';
import { accountCommands } from '../support/accounts.ts';
import { countRows, createTestDb, type TestDb } from '../support/db.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { freshStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

type Row = { seq: number; id: string; status: string; sentAt: number | null };

async function outboxRows(t: TestDb): Promise<Row[]> {
  const res = await t.client.execute('SELECT seq, id, status, sent_at FROM outbox ORDER BY seq');
  return res.rows.map((r) => ({ seq: Number(r.seq), id: String(r.id), status: String(r.status), sentAt: r.sent_at === null ? null : Number(r.sent_at) }));
}

async function entries(t: TestDb): Promise<Array<{ seq: number; id: string }>> {
  const res = await t.client.execute('SELECT seq, id FROM outbox_sent ORDER BY seq');
  return res.rows.map((r) => ({ seq: Number(r.seq), id: String(r.id) }));
}

/** A database with `n` events and a stream of its own; `batch` is the relay's batch size. */
async function backlog(n: number, batch: number, clock?: () => Date) {
  const t = await createTestDb(clock ? { deps: { clock } } : {});
  await accountCommands(t.deps).openMany(n);
  const stream = await freshStream(nats().nc, 'MARKS');
  const deps = relayDeps(t, nats().url, { stream, settings: { batch } });
  const pass = (options: Parameters<typeof relayPass>[2] = {}) => relayPass(deps, createAckPublisher(nats().nc, 5000), options);
  return { t, stream, deps, pass };
}

describe('relay - marks recorded apart while draining a backlog', () => {
  it('records the rows of a full batch in outbox_sent, leaving the outbox rows as written; they count as sent and are never read again', async () => {
    const { t, stream, pass } = await backlog(12, 5);
    await using _ = t;
    const rows = await outboxRows(t);

    const first = await pass({ markLater: 1_000_000 });
    expect(first).toMatchObject({ published: 5, more: true });
    expect(await entries(t)).toEqual(rows.slice(0, 5).map(({ seq, id }) => ({ seq, id })));
    expect((await outboxRows(t)).map((r) => r.status)).toEqual(Array(12).fill('pending'));
    const stats = await readOutboxStats(t.deps.db, new Date());
    expect(stats).toMatchObject({ pending: 7, sent: 5, failed: 0 });

    // the next passes read the other seven only, each once
    const rest = await pass();
    const last = await pass();
    expect(rest.published + last.published).toBe(7);
    expect(rest.duplicates + last.duplicates).toBe(0);
    expect((await readStream(nats().nc, stream)).map((m) => m.headers['Nats-Msg-Id'])).toEqual(rows.map((r) => r.id));
  });

  it('folds the recorded marks into the outbox: status sent at the recorded time, and the entries go', async () => {
    const { t, pass } = await backlog(8, 8);
    await using _ = t;
    const before = Date.now();
    await pass({ markLater: 1_000_000 });
    expect(await entries(t)).toHaveLength(8);

    expect(await t.deps.writer.write((tx) => foldSentMarks(tx, 3))).toBe(3);
    const partly = await outboxRows(t);
    expect(partly.map((r) => r.status)).toEqual([...Array(3).fill('sent'), ...Array(5).fill('pending')]);
    expect(await entries(t)).toHaveLength(5);
    expect(await t.deps.writer.write((tx) => foldSentMarks(tx, 500))).toBe(5);

    const after = await outboxRows(t);
    expect(after.every((r) => r.status === 'sent' && r.sentAt !== null && r.sentAt >= before && r.sentAt <= Date.now())).toBe(true);
    expect(await entries(t)).toEqual([]);
    expect(await readOutboxStats(t.deps.db, new Date())).toMatchObject({ pending: 0, sent: 8, oldestPendingAgeMs: 0 });
  });

  it('marks a retried row at once (its mark moves the epoch that frees rows held behind it), and the fresh rows apart', async () => {
    const { t, pass } = await backlog(4, 4);
    await using _ = t;
    const rows = await outboxRows(t);
    await t.client.execute({ sql: 'UPDATE outbox SET attempts = 1, available_at = 0 WHERE seq = ?', args: [rows[1]!.seq] });
    const epoch = async () => Number((await t.client.execute('SELECT retries_sent FROM outbox_relay_epoch WHERE id = 1')).rows[0]?.retries_sent ?? 0);
    const epochBefore = await epoch();

    expect(await pass({ markLater: 1_000_000 })).toMatchObject({ published: 4, more: true });
    expect((await outboxRows(t)).map((r) => r.status)).toEqual(['pending', 'sent', 'pending', 'pending']);
    expect((await entries(t)).map((e) => e.seq)).toEqual([rows[0]!.seq, rows[2]!.seq, rows[3]!.seq]);
    expect(await epoch()).toBe(epochBefore + 1);
  });

  it('publishes a row stored under a recorded seq with another event id (a restore that replaced the row): the entry names the event it recorded', async () => {
    const { t, stream, deps, pass } = await backlog(3, 3);
    await using _ = t;
    const rows = await outboxRows(t);
    await pass({ markLater: 1_000_000 });
    expect(await entries(t)).toHaveLength(3);

    const replaced = rows[1]!;
    const newId = crypto.randomUUID();
    await t.client.execute({
      sql: `INSERT OR REPLACE INTO outbox (seq, id, aggregate_type, aggregate_id, message_type, payload, headers, status, attempts, occurred_at, available_at, aggregate_hash, partition, payload_validated)
            SELECT seq, ?1, aggregate_type, aggregate_id, message_type, replace(payload, id, ?1), headers, 'pending', 0, occurred_at, available_at, aggregate_hash, partition, 0
            FROM outbox WHERE seq = ?2`,
      args: [newId, replaced.seq],
    });
    expect((await readOutboxStats(t.deps.db, new Date())).pending).toBe(1);

    const summary = await drainOutbox(deps);
    expect(summary).toMatchObject({ published: 1, duplicates: 0 });
    const ids = (await readStream(nats().nc, stream)).map((m) => m.headers['Nats-Msg-Id']);
    expect(ids).toEqual([...rows.map((r) => r.id), newId]);
    expect((await outboxRows(t)).every((r) => r.status === 'sent')).toBe(true);
    expect(await entries(t)).toEqual([]);
  });

  it('drops the entry of a recorded row a script puts back to pending, which is then published again as a script asked', async () => {
    const { t, pass } = await backlog(3, 3);
    await using _ = t;
    const rows = await outboxRows(t);
    await pass({ markLater: 1_000_000 });
    await t.client.execute({ sql: "UPDATE outbox SET status = 'pending' WHERE seq = ?", args: [rows[2]!.seq] });
    expect((await entries(t)).map((e) => e.seq)).toEqual([rows[0]!.seq, rows[1]!.seq]);

    const again = await pass();
    // the broker still holds it under its id: acknowledged as a duplicate, and marked sent
    expect(again).toMatchObject({ published: 0, duplicates: 1 });
    expect((await outboxRows(t))[2]!.status).toBe('sent');
  });

  it('lets the partition count change when every pending row is recorded as sent', async () => {
    const { t, pass } = await backlog(6, 6);
    await using _ = t;
    await pass({ markLater: 1_000_000 });
    expect(await entries(t)).toHaveLength(6);
    await expect(applyPartitionCount(t.deps.writer, 5)).resolves.toMatchObject({ previous: 16, count: 5 });
  });

  it('reports the age of the oldest pending row past the recorded ones', async () => {
    // each event a second apart
    let tick = 0;
    const base = Date.now() - 3_600_000;
    const { t, pass } = await backlog(6, 4, () => new Date(base + 1000 * tick++));
    await using _ = t;
    const occurred = (await t.client.execute('SELECT occurred_at FROM outbox ORDER BY seq')).rows.map((r) => Number(r.occurred_at));
    expect(new Set(occurred).size).toBe(6);
    await pass({ markLater: 1_000_000 });
    expect(await entries(t)).toHaveLength(4);

    const now = new Date();
    const stats = await readOutboxStats(t.deps.db, now);
    expect(stats.pending).toBe(2);
    expect(stats.oldestPendingAgeMs).toBe(now.getTime() - occurred[4]!);
  });

  it('a relay draining a backlog larger than its batch records its marks apart and, once caught up, leaves every row sent and no entry', async () => {
    const { t, stream, deps } = await backlog(230, 20);
    await using _ = t;
    // counts what the relay records apart, so the test fails if draining rewrote every row instead
    await t.client.executeMultiple(
      'CREATE TABLE recorded (n INTEGER); INSERT INTO recorded VALUES (0); CREATE TRIGGER count_recorded AFTER INSERT ON outbox_sent BEGIN UPDATE recorded SET n = n + 1; END;',
    );
    const rows = await outboxRows(t);

    const summary = await drainOutbox(deps);
    expect(summary).toMatchObject({ published: 230, duplicates: 0, failed: 0 });
    expect(Number((await t.client.execute('SELECT n FROM recorded')).rows[0]!.n)).toBeGreaterThanOrEqual(100);
    expect(await entries(t)).toEqual([]);
    expect((await outboxRows(t)).every((r) => r.status === 'sent' && r.sentAt !== null)).toBe(true);
    const ids = (await readStream(nats().nc, stream)).map((m) => m.headers['Nats-Msg-Id']);
    expect(ids).toEqual(rows.map((r) => r.id));
  });

  it('folds the marks another relay recorded and left (stopped during a drain) without publishing those rows again', async () => {
    const { t, stream, deps, pass } = await backlog(40, 40);
    await using _ = t;
    await pass({ markLater: 1_000_000 });
    expect(await entries(t)).toHaveLength(40);

    const summary = await drainOutbox(deps);
    expect(summary).toMatchObject({ published: 0, duplicates: 0 });
    expect(await entries(t)).toEqual([]);
    expect((await outboxRows(t)).every((r) => r.status === 'sent')).toBe(true);
    expect(await readStream(nats().nc, stream)).toHaveLength(40);
  });

  it('a run bounded by maxMessages folds the marks it recorded before it returns: every row it published is sent, no entry is left', async () => {
    const { t, stream, deps } = await backlog(200, 10);
    await using _ = t;
    const recorded = await countRecorded(t);
    const rows = await outboxRows(t);

    const summary = await createRelay(deps).run({ maxMessages: 30, timeLimitMs: 10_000 });
    // stopped at the first pass that reached the bound (a pass reads several batches), well before the backlog's end
    expect(summary).toMatchObject({ duplicates: 0, failed: 0 });
    expect(summary.published).toBeGreaterThanOrEqual(30);
    expect(summary.published).toBeLessThan(200);
    const published = rows.slice(0, summary.published).map((r) => r.id);
    // the passes were full, so their marks went to outbox_sent: the test fails if the run had marked in place
    expect(await recorded()).toBeGreaterThanOrEqual(30);
    expect(await entries(t)).toEqual([]);
    const after = await outboxRows(t);
    expect(after.filter((r) => r.status === 'sent').map((r) => r.id)).toEqual(published);
    expect(after.slice(summary.published).every((r) => r.status === 'pending')).toBe(true);
    expect((await readStream(nats().nc, stream)).map((m) => m.headers['Nats-Msg-Id'])).toEqual(published);
  });

  /** Records in `peak` the most entries outbox_sent held at any insert (within the inserting transaction). */
  async function watchEntries(t: TestDb): Promise<() => Promise<number>> {
    await t.client.executeMultiple(
      'CREATE TABLE peak (n INTEGER); INSERT INTO peak VALUES (0); CREATE TRIGGER peak_entries AFTER INSERT ON outbox_sent BEGIN UPDATE peak SET n = max(n, (SELECT count(*) FROM outbox_sent)); END;',
    );
    return async () => Number((await t.client.execute('SELECT n FROM peak')).rows[0]!.n);
  }

  /** Counts in `recorded` every entry ever inserted into outbox_sent. */
  async function countRecorded(t: TestDb): Promise<() => Promise<number>> {
    await t.client.executeMultiple(
      'CREATE TABLE recorded (n INTEGER); INSERT INTO recorded VALUES (0); CREATE TRIGGER recorded_entries AFTER INSERT ON outbox_sent BEGIN UPDATE recorded SET n = n + 1; END;',
    );
    return async () => Number((await t.client.execute('SELECT n FROM recorded')).rows[0]!.n);
  }

  it('never lets outbox_sent grow past its bound while draining: past it the relay marks rows in place, recording no more', async () => {
    const { t, stream, deps } = await backlog(1200, 20);
    await using _ = t;
    const peak = await watchEntries(t);
    const recorded = await countRecorded(t);
    const summary = await drainOutbox({ ...deps, recordedMarksMax: 100 });
    expect(summary).toMatchObject({ published: 1200, duplicates: 0 });
    // one pass reads at most four batches (80 rows) before its marks are written
    expect(await peak()).toBeGreaterThan(0);
    expect(await peak()).toBeLessThanOrEqual(100 + 80);
    // a recorded mark is folded later by an UPDATE of its row: past the bound, recording would only add that entry's
    // insert and delete to the same rewrite
    expect(await recorded()).toBeLessThanOrEqual(100 + 80);
    expect(await entries(t)).toEqual([]);
    expect((await outboxRows(t)).every((r) => r.status === 'sent')).toBe(true);
    expect(await readStream(nats().nc, stream)).toHaveLength(1200);
  });

  it('with a retry due the whole drain (held behind a parked row), folds what a pass recorded before the next one walks it: the entries stay within two passes', async () => {
    const t = await createTestDb();
    await using _ = t;
    const accounts = accountCommands(t.deps);
    const held = await accounts.open('held');
    await accounts.deposit(held, 100);
    const [parked, retried] = (await t.client.execute({ sql: 'SELECT seq FROM outbox WHERE aggregate_id = ? ORDER BY seq', args: [held] })).rows.map((r) =>
      Number(r.seq),
    );
    // the first event parked, the second re-queued and due now: it stays due, held behind the parked one, so every fetch
    // reads from the oldest pending row
    await t.client.execute({ sql: "UPDATE outbox SET status = 'failed', attempts = 1 WHERE seq = ?", args: [parked!] });
    await t.client.execute({ sql: 'UPDATE outbox SET attempts = 1, available_at = 0 WHERE seq = ?', args: [retried!] });
    await accounts.openMany(1500);
    const peak = await watchEntries(t);
    const stream = await freshStream(nats().nc, 'HELD');

    const summary = await drainOutbox(relayDeps(t, nats().url, { stream, settings: { batch: 20 } }));
    expect(summary).toMatchObject({ published: 1500, duplicates: 0 });
    expect(await peak()).toBeLessThanOrEqual(2 * 80);
    expect(await entries(t)).toEqual([]);
    expect(await countRows(t.client, 'outbox', "status = 'pending'")).toBe(1);
  });
});
