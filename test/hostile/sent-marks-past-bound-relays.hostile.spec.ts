// The in-place marks past the recorded-marks bound with retries coming due mid-drain, several relays with
// different bounds sharing partitions, a relay that crashes between its PubAcks and its marks, and a foreign write lock.
// Every relay checks, before it publishes a batch, that none of its rows is already marked sent (in place or recorded).
import { describe, expect, it } from 'vitest';
import type { PendingRow } from '../../src/outbox/relay-store.ts';
import { accountCommands } from '../support/accounts.ts';
import { countRows, createTestDb, MARKED_SENT, type TestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { drainOutbox, relayDeps, runRelay, type RelayOverrides, republishGuard } from '../support/relay.ts';
import { freshStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';
import { outboxOrder, streamOrder } from '../support/aggregate-order.ts';
import { startWriteLockHolder } from '../support/write-lock.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { createOutboxMetrics } from '../../src/outbox/outbox-metrics.ts';
import { registryOf } from '../../src/compose/define-modules.ts';
import { parseConfig } from '../../src/config.ts';
import { createDatabase } from '../../src/db/open-database.ts';
import { createDeps } from '../../src/deps.ts';
import { openClient } from '../../src/entry/boot.ts';
import { silentLogger } from '../../src/logger.ts';
import { fixtureModules } from '../support/fixture/modules.ts';

const nats = useNats();

/** Fails the first `times` tries of the rows whose ids are in `ids` with a permanent error (retried after a back-off). */
function failingFirst(ids: ReadonlySet<string>, times: number) {
  const tries = new Map<string, number>();
  return (row: PendingRow) => {
    if (!ids.has(row.id)) return undefined;
    const n = (tries.get(row.id) ?? 0) + 1;
    tries.set(row.id, n);
    return n <= times ? new Error(`refused for the test (try ${n})`) : undefined;
  };
}

async function peakWatch(t: TestDb) {
  await t.client.executeMultiple(
    'CREATE TABLE entries_peak (n INTEGER); INSERT INTO entries_peak VALUES (0); CREATE TRIGGER peak_inserts AFTER INSERT ON outbox_sent BEGIN UPDATE entries_peak SET n = max(n, (SELECT count(*) FROM outbox_sent)); END;',
  );
  return async () => Number((await t.client.execute('SELECT n FROM entries_peak')).rows[0]!.n);
}

const allSentAndFolded = async (t: TestDb, total: number) =>
  (await countRows(t.client, 'outbox', "status = 'sent'")) === total && (await countRows(t.client, 'outbox_sent')) === 0;

describe('in-place marks past the bound, relays and failures', () => {
  it('control: the republish guard sees rows marked before their publish (the broken variant markBeforePublish)', async () => {
    await using t = await createTestDb();
    await accountCommands(t.deps).openMany(10);
    const guard = republishGuard(t);
    const stream = await freshStream(nats().nc, 'GUARDCONTROL');
    await drainOutbox(
      relayDeps(t, nats().url, {
        stream,
        settings: { batch: 4 },
        recordedMarksMax: 1,
        faults: { markBeforePublish: true, beforePublishing: guard.beforePublishing },
      }),
    );
    expect(guard.violations.length).toBeGreaterThan(0);
  });

  it('retries coming due mid-drain (rows refused once or twice, aggregates held behind them) while the table sits at the bound', {
    timeout: 90_000,
  }, async () => {
    await using t = await createTestDb();
    const accounts = accountCommands(t.deps);
    const ids = await accounts.openMany(120);
    for (let round = 0; round < 3; round++) await Promise.all(ids.map((id) => accounts.deposit(id, 100 + round)));
    const all = (await t.client.execute('SELECT seq, id FROM outbox ORDER BY seq')).rows.map((r) => String(r.id));
    const total = all.length;
    // every 17th row refused twice, every 29th once: retries come due all through the drain
    const twice = new Set(all.filter((_, i) => i % 17 === 5));
    const once = new Set(all.filter((_, i) => i % 29 === 7 && !twice.has(all[i]!)));
    const f2 = failingFirst(twice, 2);
    const f1 = failingFirst(once, 1);
    const guard = republishGuard(t);
    const peak = await peakWatch(t);
    const stream = await freshStream(nats().nc, 'RETRIESDUE');
    const relay = runRelay(
      relayDeps(t, nats().url, {
        stream,
        settings: { batch: 5, backoffBaseMs: 10, maxBackoffMs: 60 },
        recordedMarksMax: 2,
        faults: { beforePublish: (row) => f2(row) ?? f1(row), beforePublishing: guard.beforePublishing },
      }),
    );
    await eventually(() => allSentAndFolded(t, total), { timeoutMs: 60_000, what: 'every row sent and folded' });
    const summary = await relay.stop();
    expect(guard.violations).toEqual([]);
    expect(summary.duplicates).toBe(0);
    expect(summary.parked).toBe(0);
    const msgs = await readStream(nats().nc, stream);
    const seen = msgs.map((m) => m.headers['Nats-Msg-Id']);
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen.length).toBe(total);
    expect(streamOrder(msgs)).toEqual(await outboxOrder(t));
    expect(await peak()).toBeLessThanOrEqual(2 - 1 + 4 * 5);
  });

  it('three relays with bounds 1, 2 and 5 over shared partitions (one stopped mid-drain, one started late), writers running, refusals, short duplicate window', {
    timeout: 120_000,
  }, async () => {
    await using t = await createTestDb();
    const accounts = accountCommands(t.deps);
    const ids = await accounts.openMany(200);
    for (let round = 0; round < 3; round++) await Promise.all(ids.map((id) => accounts.deposit(id, 100 + round)));
    const early = (await t.client.execute('SELECT id FROM outbox ORDER BY seq')).rows.map((r) => String(r.id));
    const refused = failingFirst(new Set(early.filter((_, i) => i % 23 === 3)), 1);
    const guard = republishGuard(t);
    const peak = await peakWatch(t);
    const stream = await freshStream(nats().nc, 'THREEBOUNDS', { duplicateWindowMs: 1000, maxBackoffMs: 100 });
    const over = (owner: string, bound: number): RelayOverrides => ({
      stream,
      settings: { batch: 7, backoffBaseMs: 10, maxBackoffMs: 60 },
      recordedMarksMax: bound,
      lease: { owner, ttlMs: 1500 },
      faults: { beforePublish: refused, beforePublishing: guard.beforePublishing },
    });
    const a = runRelay(relayDeps(t, nats().url, over('relay-a', 1)));
    const b = runRelay(relayDeps(t, nats().url, over('relay-b', 2)));
    for (let round = 3; round < 5; round++) {
      await Promise.all(ids.slice(0, 100).map((id) => accounts.deposit(id, 100 + round)));
      await new Promise((r) => setTimeout(r, 100));
    }
    const sa = await a.stop();
    const c = runRelay(relayDeps(t, nats().url, over('relay-c', 5)));
    for (let round = 5; round < 7; round++) {
      await Promise.all(ids.slice(100).map((id) => accounts.deposit(id, 100 + round)));
      await new Promise((r) => setTimeout(r, 100));
    }
    const total = await countRows(t.client, 'outbox');
    await eventually(() => allSentAndFolded(t, total), { timeoutMs: 60_000, what: 'every row sent and folded' });
    const sb = await b.stop();
    const sc = await c.stop();
    expect(guard.violations).toEqual([]);
    const msgs = await readStream(nats().nc, stream);
    const seen = msgs.map((m) => m.headers['Nats-Msg-Id']);
    expect(new Set(seen).size, 'an event stored twice').toBe(seen.length);
    expect(seen.length).toBe(total);
    expect(streamOrder(msgs)).toEqual(await outboxOrder(t));
    expect(sa.parked + sb.parked + sc.parked).toBe(0);
    expect(await peak()).toBeLessThanOrEqual(5 - 1 + 4 * 7);
  });

  it('a relay that crashes between its PubAcks and its marks with the table past its bound: the next relay folds, republishes only the unmarked rows (duplicates), loses none', {
    timeout: 60_000,
  }, async () => {
    await using t = await createTestDb();
    const accounts = accountCommands(t.deps);
    const ids = await accounts.openMany(60);
    for (let round = 0; round < 2; round++) await Promise.all(ids.map((id) => accounts.deposit(id, 100 + round)));
    const total = await countRows(t.client, 'outbox');
    const stream = await freshStream(nats().nc, 'CRASHBEFOREMARKS');
    let passes = 0;
    let unmarked: string[] = [];
    const guardA = republishGuard(t);
    const crashing = relayDeps(t, nats().url, {
      stream,
      settings: { batch: 5 },
      recordedMarksMax: 3,
      faults: {
        beforePublishing: guardA.beforePublishing,
        afterPubAcks: (rows) => {
          if (++passes === 6) {
            unmarked = rows.map((r) => r.id);
            throw new Error('crash after the PubAcks, before the marks');
          }
        },
      },
    });
    await expect(drainOutbox(crashing)).rejects.toThrow(/crash after the PubAcks/);
    expect(unmarked.length).toBeGreaterThan(0);
    // the crashed relay left recorded entries at or past its bound and rows marked in place
    expect(await countRows(t.client, 'outbox_sent')).toBeGreaterThanOrEqual(3);
    expect(await countRows(t.client, 'outbox', "status = 'sent'")).toBeGreaterThan(0);
    const markedBefore = await countRows(t.client, 'outbox', MARKED_SENT);
    expect(markedBefore + unmarked.length).toBeLessThanOrEqual(total);

    const guardB = republishGuard(t);
    const summary = await drainOutbox(
      relayDeps(t, nats().url, { stream, settings: { batch: 4 }, recordedMarksMax: 1, faults: { beforePublishing: guardB.beforePublishing } }),
    );
    expect(guardA.violations).toEqual([]);
    expect(guardB.violations).toEqual([]);
    expect(summary.duplicates).toBe(unmarked.length);
    expect(summary.published + summary.duplicates).toBe(total - markedBefore);
    const msgs = await readStream(nats().nc, stream);
    const seen = msgs.map((m) => m.headers['Nats-Msg-Id']);
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen.length).toBe(total);
    expect(streamOrder(msgs)).toEqual(await outboxOrder(t));
    expect(await allSentAndFolded(t, total)).toBe(true);
  });

  it('a foreign write lock held past the busy budget mid-drain (table at the bound): marks refused, rows come back as duplicates only, all folded', {
    timeout: 60_000,
  }, async () => {
    await using created = await createTestDb();
    const client = await openClient(created.url, parseConfig({ DATABASE_URL: created.url, DATABASE_BUSY_TIMEOUT_MS: '300' }));
    try {
      const t = { ...created, client, deps: createDeps(createDatabase(client), silentLogger, registryOf(fixtureModules)) };
      const accounts = accountCommands(t.deps);
      const ids = await accounts.openMany(150);
      for (let round = 0; round < 3; round++) await Promise.all(ids.map((id) => accounts.deposit(id, 100 + round)));
      const total = await countRows(t.client, 'outbox');
      const stream = await freshStream(nats().nc, 'FOREIGNLOCK');
      const registry = createMetrics();
      const guard = republishGuard(t);
      await using holder = await startWriteLockHolder(t.url);
      let locked = false;
      let marksSeen = 0;
      const relay = runRelay(
        relayDeps(t, nats().url, {
          stream,
          settings: { batch: 6 },
          recordedMarksMax: 4,
          metrics: createOutboxMetrics(registry),
          faults: {
            beforePublishing: guard.beforePublishing,
            // take the foreign lock once the table is at its bound, between a pass's PubAcks and its marks
            afterPubAcks: async () => {
              if (locked || ++marksSeen < 8) return;
              locked = true;
              await holder.lock();
            },
          },
        }),
      );
      await eventually(async () => /database_unavailable"\} [1-9]/.test(await registry.render()), { timeoutMs: 20_000, what: 'a write refused' });
      await holder.release();
      await eventually(() => allSentAndFolded(t, total), { timeoutMs: 30_000, what: 'every row sent and folded' });
      const summary = await relay.stop();
      expect(guard.violations).toEqual([]);
      expect(summary.duplicates).toBeGreaterThan(0);
      const msgs = await readStream(nats().nc, stream);
      const seen = msgs.map((m) => m.headers['Nats-Msg-Id']);
      expect(new Set(seen).size).toBe(seen.length);
      expect(seen.length).toBe(total);
      expect(streamOrder(msgs)).toEqual(await outboxOrder(t));
    } finally {
      client.close();
    }
  });
});
