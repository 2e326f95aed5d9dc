// A run bounded by --max-messages folds its recorded marks before it ends (src/outbox/relay.ts), over awkward backlogs: retried rows (attempts > 0) and
// refusals holding aggregates, the recorded-marks bound reached, the bound reached on a partial pass, and duplicates
// (rows a killed relay had published). After the bounded run: every row counted as sent is in the stream, every row in
// the stream is counted as sent, outbox_sent is empty; the next run publishes the rest once, in aggregate order.
import { describe, expect, it } from 'vitest';
import { createRelay, type RelayRunOptions } from '../../src/outbox/relay.ts';
import type { PendingRow } from '../../src/outbox/relay-store.ts';
import { outboxOrder, streamOrder } from '../support/aggregate-order.ts';
import { accountCommands } from '../support/accounts.ts';
import { countRows, createTestDb, MARKED_SENT, type TestDb } from '../support/db.ts';
import { drainOutbox, publishAsAKilledRelay, relayDeps, type RelayOverrides } from '../support/relay.ts';
import { freshStream, readStream } from '../support/stream.ts';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

async function peakWatch(t: TestDb) {
  await t.client.executeMultiple(
    'CREATE TABLE entries_peak (n INTEGER); INSERT INTO entries_peak VALUES (0); CREATE TRIGGER peak_inserts AFTER INSERT ON outbox_sent BEGIN UPDATE entries_peak SET n = max(n, (SELECT count(*) FROM outbox_sent)); END;' +
      'CREATE TABLE recorded (n INTEGER); INSERT INTO recorded VALUES (0); CREATE TRIGGER count_recorded AFTER INSERT ON outbox_sent BEGIN UPDATE recorded SET n = n + 1; END;',
  );
  return {
    peak: async () => Number((await t.client.execute('SELECT n FROM entries_peak')).rows[0]!.n),
    recorded: async () => Number((await t.client.execute('SELECT n FROM recorded')).rows[0]!.n),
  };
}

/** Checks the state a bounded run left, then drains the rest and checks the stream. */
async function afterBoundedRun(t: TestDb, stream: StreamSettings, over: RelayOverrides = {}) {
  const streamedIds = (await readStream(nats().nc, stream)).map((m) => m.headers['Nats-Msg-Id']!);
  const markedIds = (await t.client.execute(`SELECT id FROM outbox WHERE ${MARKED_SENT} ORDER BY seq`)).rows.map((r) => String(r.id));
  const inStream = new Set(streamedIds);
  expect(
    markedIds.filter((id) => !inStream.has(id)),
    'counted as sent, not in the stream',
  ).toEqual([]);
  const marked = new Set(markedIds);
  expect(
    streamedIds.filter((id) => !marked.has(id)),
    'in the stream, not counted as sent',
  ).toEqual([]);
  expect(await countRows(t.client, 'outbox_sent'), 'entries left after the bounded run').toBe(0);
  // drained until nothing is pending (a refused row waits out its retry back-off: an idle run stops before it)
  const next = await drainOutbox(relayDeps(t, nats().url, { stream, ...over }));
  for (let i = 0; i < 50 && (await countRows(t.client, 'outbox', "status = 'pending'")) > 0; i++) {
    await new Promise((r) => setTimeout(r, 50));
    const more = await drainOutbox(relayDeps(t, nats().url, { stream, ...over }));
    next.published += more.published;
    next.duplicates += more.duplicates;
  }
  const all = await readStream(nats().nc, stream);
  const got = all.map((m) => m.headers['Nats-Msg-Id']);
  expect(new Set(got).size, 'an event stored twice').toBe(got.length);
  expect(got.length).toBe(await countRows(t.client, 'outbox', "status != 'failed'"));
  const want = await outboxOrder(t);
  const order = streamOrder(all);
  for (const [agg, list] of want) {
    const failed = new Set(
      (await t.client.execute({ sql: "SELECT id FROM outbox WHERE aggregate_id = ? AND status = 'failed'", args: [agg] })).rows.map((r) => String(r.id)),
    );
    expect(order.get(agg) ?? [], agg).toEqual(list.filter((id) => !failed.has(id)));
  }
  expect(await countRows(t.client, 'outbox', "status = 'pending'")).toBe(0);
  expect(await countRows(t.client, 'outbox_sent')).toBe(0);
  return next;
}

async function bounded(t: TestDb, stream: StreamSettings, over: RelayOverrides, options: RelayRunOptions) {
  return createRelay(relayDeps(t, nats().url, { stream, ...over })).run({ timeLimitMs: 15_000, ...options });
}

describe('relay - runs bounded by --max-messages over awkward backlogs', () => {
  it('retried rows (attempts > 0) and refusals in the backlog: the retried rows are marked in place, the rest recorded and folded', {
    timeout: 25_000,
  }, async () => {
    await using t = await createTestDb();
    const accounts = accountCommands(t.deps);
    const ids = await accounts.openMany(150);
    for (const id of ids) await accounts.deposit(id, 5);
    const rows = (await t.client.execute('SELECT seq, id FROM outbox ORDER BY seq')).rows.map((r) => ({ seq: Number(r.seq), id: String(r.id) }));
    // every 11th row a retry due now, every 13th refused once (its aggregate held behind it)
    const retried = rows.filter((_, i) => i % 11 === 3);
    await t.client.execute({
      sql: 'UPDATE outbox SET attempts = 1, available_at = 0 WHERE seq IN (SELECT value FROM json_each(?))',
      args: [JSON.stringify(retried.map((r) => r.seq))],
    });
    const refuse = new Set(rows.filter((_, i) => i % 13 === 6).map((r) => r.id));
    const tries = new Map<string, number>();
    const beforePublish = (row: PendingRow) => {
      if (!refuse.has(row.id)) return undefined;
      const n = (tries.get(row.id) ?? 0) + 1;
      tries.set(row.id, n);
      return n === 1 ? new Error('refused once for the test') : undefined;
    };
    const w = await peakWatch(t);
    const stream = await freshStream(nats().nc, 'BFRETRY');
    const over: RelayOverrides = { settings: { batch: 10, backoffBaseMs: 10, maxBackoffMs: 50 }, faults: { beforePublish } };
    const summary = await bounded(t, stream, over, { maxMessages: 120 });
    expect(summary.published).toBeGreaterThanOrEqual(120);
    expect(summary.failed).toBeGreaterThan(0);
    expect(await w.recorded()).toBeGreaterThan(0);
    const next = await afterBoundedRun(t, stream, over);
    expect(next.duplicates).toBe(0);
  });

  it('the recorded-marks bound reached (recordedMarksMax 25) during a bounded run', { timeout: 25_000 }, async () => {
    await using t = await createTestDb();
    await accountCommands(t.deps).openMany(600);
    const w = await peakWatch(t);
    const stream = await freshStream(nats().nc, 'BFBOUND');
    const over: RelayOverrides = { settings: { batch: 10 }, recordedMarksMax: 25 };
    const summary = await bounded(t, stream, over, { maxMessages: 400 });
    expect(summary.published).toBeGreaterThanOrEqual(400);
    expect(summary.published).toBeLessThan(600);
    expect(await w.recorded()).toBeGreaterThan(0);
    expect(await w.peak()).toBeLessThanOrEqual(25 - 1 + 40);
    const next = await afterBoundedRun(t, stream, over);
    expect(next.duplicates).toBe(0);
  });

  it('the bound reached on a partial pass after full ones that recorded their marks', { timeout: 25_000 }, async () => {
    await using t = await createTestDb();
    await accountCommands(t.deps).openMany(45);
    const w = await peakWatch(t);
    const stream = await freshStream(nats().nc, 'BFPARTIAL');
    // a pass reads 4 batches of 10: 40 recorded, then a partial pass of 5 reaches the bound
    const summary = await bounded(t, stream, { settings: { batch: 10 } }, { maxMessages: 45 });
    expect(summary).toMatchObject({ published: 45, duplicates: 0 });
    expect(await w.recorded()).toBeGreaterThanOrEqual(40);
    expect(await countRows(t.client, 'outbox', "status = 'sent'")).toBe(45);
    await afterBoundedRun(t, stream, { settings: { batch: 10 } });
  });

  it('the bound reached with duplicates (rows a killed relay had published): they are folded too, the next run republishes none', {
    timeout: 25_000,
  }, async () => {
    await using t = await createTestDb();
    await accountCommands(t.deps).openMany(200);
    const stream = await freshStream(nats().nc, 'BFDUPS');
    // the first 120 rows were published by a relay killed before its marks
    const rows = (await t.client.execute('SELECT seq FROM outbox ORDER BY seq')).rows.map((r) => Number(r.seq));
    await t.client.execute({ sql: "UPDATE outbox SET status = 'failed' WHERE seq > ?", args: [rows[119]!] });
    expect(await publishAsAKilledRelay(t, nats().nc, stream)).toBe(120);
    await t.client.execute({ sql: "UPDATE outbox SET status = 'pending', attempts = 0, last_error = NULL WHERE seq > ?", args: [rows[119]!] });
    const w = await peakWatch(t);
    const summary = await bounded(t, stream, { settings: { batch: 10 } }, { maxMessages: 100 });
    expect(summary.duplicates).toBeGreaterThanOrEqual(100);
    expect(await w.recorded()).toBeGreaterThan(0);
    const next = await afterBoundedRun(t, stream, { settings: { batch: 10 } });
    expect(next.published + summary.published + summary.duplicates).toBe(200);
  });
});
