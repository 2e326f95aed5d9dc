// Marks recorded apart (outbox_sent) against a fold that fails half-way, an operator's re-queue, compaction and two relays with different bounds.
import { describe, expect, it } from 'vitest';
import { createAckPublisher } from '../../src/nats/ack-publisher.ts';
import { readOutboxStats } from '../../src/outbox/outbox-stats.ts';
import { relayPass } from '../../src/outbox/relay-pass.ts';
import { foldSentMarks } from '../../src/outbox/relay-store.ts';
import { requeueFailed } from '../../src/outbox/failed-rows.ts';
import { compactOutbox } from '../../src/outbox/compact-outbox.ts';
import { accountCommands } from '../support/accounts.ts';
import { countRows, createTestDb, MARKED_SENT } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { drainOutbox, relayDeps, runRelay } from '../support/relay.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { createOutboxMetrics } from '../../src/outbox/outbox-metrics.ts';
import { freshStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';
import { outboxOrder, streamOrder } from '../support/aggregate-order.ts';
import { startWriteLockHolder } from '../support/write-lock.ts';
import { registryOf } from '../../src/compose/define-modules.ts';
import { parseConfig } from '../../src/config.ts';
import { createDatabase } from '../../src/db/open-database.ts';
import { createDeps } from '../../src/deps.ts';
import { openClient } from '../../src/entry/boot.ts';
import { silentLogger } from '../../src/logger.ts';
import { fixtureModules } from '../support/fixture/modules.ts';

const nats = useNats();

describe('relay - marks recorded apart: a failed fold, operators, compaction and two relays', () => {
  it('a fold whose DELETE fails rolls back its UPDATE: rows stay pending with their entries, nothing republished, stats exact', async () => {
    await using t = await createTestDb();
    await accountCommands(t.deps).openMany(10);
    const stream = await freshStream(nats().nc, 'ADVFOLD', { duplicateWindowMs: 1000, maxBackoffMs: 100 });
    const deps = relayDeps(t, nats().url, { stream, settings: { batch: 10 } });
    const first = await relayPass(deps, createAckPublisher(nats().nc, 5000), { markLater: 1_000_000 });
    expect(first).toMatchObject({ published: 10, more: true });
    expect(await countRows(t.client, 'outbox_sent')).toBe(10);
    await t.client.execute('CREATE TABLE fold_refused (on_ INTEGER)');
    await t.client.execute('INSERT INTO fold_refused VALUES (1)');
    await t.client.execute(
      "CREATE TRIGGER refuse_fold BEFORE DELETE ON outbox_sent WHEN (SELECT on_ FROM fold_refused) = 1 BEGIN SELECT RAISE(ABORT, 'delete refused for the test'); END",
    );
    await expect(t.deps.writer.write((tx) => foldSentMarks(tx, 500))).rejects.toThrow(/delete refused for the test/);
    expect(await countRows(t.client, 'outbox', "status = 'pending'")).toBe(10);
    expect(await countRows(t.client, 'outbox_sent')).toBe(10);
    expect(await readOutboxStats(t.deps.db, new Date())).toMatchObject({ pending: 0, failed: 0, sent: 10 });
    await new Promise((r) => setTimeout(r, 1300)); // past the duplicate window: a republish would show in the stream
    await t.client.execute('UPDATE fold_refused SET on_ = 0');
    const summary = await drainOutbox(deps);
    expect({ published: summary.published, duplicates: summary.duplicates }).toEqual({ published: 0, duplicates: 0 });
    expect(await readStream(nats().nc, stream)).toHaveLength(10);
    expect(await countRows(t.client, 'outbox', "status = 'sent'")).toBe(10);
    expect(await countRows(t.client, 'outbox_sent')).toBe(0);
  });

  it('a parked row in the middle of a recorded drain, re-queued by an operator: its aggregate stays in order, every event once', {
    timeout: 60_000,
  }, async () => {
    await using t = await createTestDb();
    const accounts = accountCommands(t.deps);
    const ids = await accounts.openMany(40);
    const victim = ids[7]!;
    for (let round = 0; round < 4; round++) await Promise.all(ids.map((id) => accounts.deposit(id, 100 + round)));
    // park the victim's second event by hand (as an operator / the relay would after its last attempt)
    const { rows: vrows } = await t.client.execute({ sql: 'SELECT seq FROM outbox WHERE aggregate_id = ? ORDER BY seq', args: [victim] });
    const parkedSeq = Number(vrows[1]!.seq);
    await t.client.execute({ sql: "UPDATE outbox SET status = 'failed', attempts = 5, last_error = 'parked by hand' WHERE seq = ?", args: [parkedSeq] });
    const total = await countRows(t.client, 'outbox');
    const stream = await freshStream(nats().nc, 'ADVPARK', { duplicateWindowMs: 1000, maxBackoffMs: 100 });
    const deps = relayDeps(t, nats().url, { stream, settings: { batch: 7 }, recordedMarksMax: 9 });
    const s1 = await drainOutbox(deps);
    expect(s1.published).toBe(total - 4); // the parked row and the 3 behind it held
    expect(await readOutboxStats(t.deps.db, new Date())).toMatchObject({ pending: 3, failed: 1, sent: total - 4 });
    expect(await countRows(t.client, 'outbox_sent')).toBe(0);
    await new Promise((r) => setTimeout(r, 1300));
    expect(await t.deps.writer.write((tx) => requeueFailed(tx, undefined))).toBe(1);
    const s2 = await drainOutbox(deps);
    expect({ published: s2.published, duplicates: s2.duplicates }).toEqual({ published: 4, duplicates: 0 });
    const msgs = await readStream(nats().nc, stream);
    const seen = msgs.map((m) => m.headers['Nats-Msg-Id']);
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen.length).toBe(total);
    expect(streamOrder(msgs)).toEqual(await outboxOrder(t));
    expect(await readOutboxStats(t.deps.db, new Date())).toMatchObject({ pending: 0, failed: 0, sent: total, oldestPendingAgeMs: 0 });
  });

  it('two relays with different recordedMarksMax (1 and a million), writers running, short duplicate window: once each, in order, folded', {
    timeout: 120_000,
  }, async () => {
    await using t = await createTestDb();
    const accounts = accountCommands(t.deps);
    const ids = await accounts.openMany(200);
    for (let round = 0; round < 3; round++) await Promise.all(ids.map((id) => accounts.deposit(id, 100 + round)));
    await t.client.execute('UPDATE outbox SET attempts = 1, available_at = 0 WHERE seq IN (100, 350, 610)');
    const stream = await freshStream(nats().nc, 'ADVCAPS', { duplicateWindowMs: 1000, maxBackoffMs: 100 });
    const a = runRelay(relayDeps(t, nats().url, { stream, settings: { batch: 20 }, recordedMarksMax: 1, lease: { owner: 'relay-a', ttlMs: 1500 } }));
    const b = runRelay(relayDeps(t, nats().url, { stream, settings: { batch: 20 }, recordedMarksMax: 1_000_000, lease: { owner: 'relay-b', ttlMs: 1500 } }));
    for (let round = 3; round < 6; round++) {
      await Promise.all(ids.slice(0, 120).map((id) => accounts.deposit(id, 100 + round)));
      await new Promise((r) => setTimeout(r, 150));
    }
    const total = await countRows(t.client, 'outbox');
    await eventually(async () => (await countRows(t.client, 'outbox', "status = 'sent'")) === total && (await countRows(t.client, 'outbox_sent')) === 0, {
      timeoutMs: 40_000,
      what: 'all sent and folded',
    });
    const sa = await a.stop();
    const sb = await b.stop();
    const msgs = await readStream(nats().nc, stream);
    const seen = msgs.map((m) => m.headers['Nats-Msg-Id']);
    expect(new Set(seen).size, 'duplicates in the stream').toBe(seen.length);
    expect(seen.length).toBe(total);
    expect(sa.duplicates + sb.duplicates).toBe(0);
    expect(streamOrder(msgs)).toEqual(await outboxOrder(t));
    expect(await readOutboxStats(t.deps.db, new Date())).toMatchObject({ pending: 0, failed: 0, sent: total });
  });

  it('compaction with entries present deletes only sent rows, keeps stats exact, and takes the folded rows later', async () => {
    await using t = await createTestDb();
    await accountCommands(t.deps).openMany(12);
    const stream = await freshStream(nats().nc, 'ADVCOMP');
    const deps = relayDeps(t, nats().url, { stream, settings: { batch: 8 } });
    const pub = createAckPublisher(nats().nc, 5000);
    expect(await relayPass(deps, pub, { markLater: 1_000_000 })).toMatchObject({ published: 8, more: true });
    expect(await relayPass(deps, pub, { markLater: 1_000_000 })).toMatchObject({ published: 4, more: false });
    expect(await countRows(t.client, 'outbox_sent')).toBe(8);
    expect(await countRows(t.client, 'outbox', "status = 'sent'")).toBe(4);
    const cut = Date.now() + 1000;
    const r1 = await compactOutbox({ writer: t.deps.writer, clock: () => new Date(cut + 120_000) }, { cutoffMs: cut, batch: 3 });
    expect(r1.deleted).toBe(4);
    expect(await countRows(t.client, 'outbox')).toBe(8);
    expect(await readOutboxStats(t.deps.db, new Date())).toMatchObject({ pending: 0, failed: 0, sent: 12 });
    expect(await countRows(t.client, 'outbox', MARKED_SENT)).toBe(8);
    expect(await t.deps.writer.write((tx) => foldSentMarks(tx, 500))).toBe(8);
    const r2 = await compactOutbox({ writer: t.deps.writer, clock: () => new Date(cut + 120_000) }, { cutoffMs: cut, batch: 3 });
    expect(r2.deleted).toBe(8);
    expect(await readOutboxStats(t.deps.db, new Date())).toMatchObject({ pending: 0, failed: 0, sent: 12 });
    expect(await readStream(nats().nc, stream)).toHaveLength(12);
  });

  it('a fold refused by a foreign write lock held past the busy timeout backs the relay off; once the lock goes, every recorded row is folded, none published again', async () => {
    await using created = await createTestDb();
    // the relay's database opened as the service opens it, with a short busy budget
    const client = await openClient(created.url, parseConfig({ DATABASE_URL: created.url, DATABASE_BUSY_TIMEOUT_MS: '300' }));
    try {
      const t = { ...created, client, deps: createDeps(createDatabase(client), silentLogger, registryOf(fixtureModules)) };
      await accountCommands(t.deps).openMany(30);
      const stream = await freshStream(nats().nc, 'FOLDLOCK');
      const registry = createMetrics();
      const deps = relayDeps(t, nats().url, { stream, settings: { batch: 30 }, metrics: createOutboxMetrics(registry) });
      expect(await relayPass(deps, createAckPublisher(nats().nc, 5000), { markLater: 1_000_000 })).toMatchObject({ published: 30, more: true });
      expect(await countRows(t.client, 'outbox_sent')).toBe(30);

      await using holder = await startWriteLockHolder(t.url);
      await holder.lock();
      // a relay started now reads from the oldest pending row, walks the entries and must fold them: the lock refuses it
      const relay = runRelay(deps);
      await eventually(async () => /database_unavailable"\} [1-9]/.test(await registry.render()), {
        timeoutMs: 10_000,
        what: 'the fold refused (database_unavailable)',
      });
      expect(await countRows(t.client, 'outbox_sent')).toBe(30);
      await holder.release();

      await eventually(async () => (await countRows(t.client, 'outbox_sent')) === 0 && (await countRows(t.client, 'outbox', "status = 'sent'")) === 30, {
        timeoutMs: 15_000,
        what: 'every recorded row folded',
      });
      const summary = await relay.stop();
      expect({ published: summary.published, duplicates: summary.duplicates }).toEqual({ published: 0, duplicates: 0 });
      expect(await readStream(nats().nc, stream)).toHaveLength(30);
    } finally {
      client.close();
    }
  });
});
