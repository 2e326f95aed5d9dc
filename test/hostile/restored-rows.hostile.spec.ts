// Migration 0007 (outbox_row_placed / outbox_row_moved): a row stored below what a running relay already
// read must be read again before the next event of its aggregate goes out. Real libSQL file, real nats-server,
// the relay as the service runs it (leases over 16 partitions).
import { openedEvent } from '../support/accounts.ts';
import { describe, expect, it } from 'vitest';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { appendToOutbox } from '../../src/outbox/append-to-outbox.ts';
import { countRows, createTestDb, type TestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { relayDeps, runRelay } from '../support/relay.ts';
import { ownStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();
const PARTITIONS = 16;

const append = (t: TestDb, events: IntegrationEvent[]) =>
  t.deps.writer.write((tx) => appendToOutbox(tx, events, { registry: t.deps.registry, now: new Date() }));

const COLUMNS =
  'id, aggregate_type, aggregate_id, message_type, payload, headers, status, attempts, occurred_at, available_at, aggregate_hash, partition, payload_validated';

describe('relay - a marked row restored at the highest seq a running relay already read', () => {
  it('is published before the next event of its aggregate (a restore copies every column, the mark too)', async () => {
    await using t = await createTestDb();
    // the backup: the same release stored the lost event, marked and placed as appendToOutbox places it
    await using backup = await createTestDb();
    const stream = ownStream('RESTOREMAX');
    const acc = `acc-${crypto.randomUUID()}`;
    await append(backup, [openedEvent({ accountId: acc, owner: 'restored' })]);
    const saved = (await backup.client.execute(`SELECT ${COLUMNS} FROM outbox`)).rows[0]!;

    for (let i = 0; i < 5; i++) await append(t, [openedEvent({ accountId: `acc-${crypto.randomUUID()}`, owner: `owner-${i}` })]);
    const running = runRelay(relayDeps(t, nats().url, { stream, partitions: PARTITIONS, lease: { owner: 'restore-max', ttlMs: 60_000 } }), 20_000);
    try {
      await eventually(async () => (await countRows(t.client, 'outbox', "status = 'sent'")) === 5, { timeoutMs: 5000, what: 'the first rows sent' });
      await new Promise((r) => setTimeout(r, 200)); // a few idle passes: the relay's floor is the highest seq, 5
      // a restore puts a lost pending row back with every column (the mark too) under its original seq, the highest
      // one: INSERT OR REPLACE … SELECT from the backup, as one statement
      await t.client.execute({
        sql: `INSERT OR REPLACE INTO outbox (seq, ${COLUMNS}) VALUES (5, ${COLUMNS.split(', ')
          .map(() => '?')
          .join(', ')})`,
        args: COLUMNS.split(', ').map((c) => saved[c] as never),
      });
      await new Promise((r) => setTimeout(r, 300));
      await append(t, [openedEvent({ accountId: acc, owner: 'next', version: 2 })]);
      await eventually(async () => (await countRows(t.client, 'outbox', "status = 'pending'")) === 0, { timeoutMs: 3000 }).catch(() => undefined);
      const owners = (await readStream(nats().nc, stream)).filter((m) => m.event.aggregateId === acc).map((m) => (m.event.data as { owner: string }).owner);
      expect(owners, 'the next event overtook the restored one, which stays pending below the floor').toEqual(['restored', 'next']);
    } finally {
      await running.stop();
    }
  });
});

describe('relay - a restored row hashed by another relay than the one that owns its partition', () => {
  it('is still read by its owner, whose floor is above it, before the next event of its aggregate', async () => {
    await using t = await createTestDb();
    const stream = ownStream('RESTOREOTHER');
    for (let i = 0; i < 5; i++) await append(t, [openedEvent({ accountId: `acc-${crypto.randomUUID()}`, owner: `owner-${i}` })]);
    // the owner of every partition, polling slowly (nothing wakes it: the writes below come from elsewhere)
    const owner = runRelay(relayDeps(t, nats().url, { stream, partitions: PARTITIONS, pollMs: 1500, lease: { owner: 'owner', ttlMs: 60_000 } }), 20_000);
    try {
      await eventually(async () => (await countRows(t.client, 'outbox', "status = 'sent'")) === 5, { timeoutMs: 5000, what: 'the first rows sent' });
      await new Promise((r) => setTimeout(r, 1600)); // an idle pass: the owner's floor is the highest seq
      const acc = `acc-${crypto.randomUUID()}`;
      const event = openedEvent({ accountId: acc, owner: 'restored' });
      await t.client.execute('DELETE FROM outbox WHERE seq = 2');
      // a restore without the mark: the trigger clears its hash …
      await t.client.execute({
        sql: `INSERT INTO outbox (seq, id, aggregate_type, aggregate_id, message_type, payload, status, occurred_at, available_at, aggregate_hash, partition)
              VALUES (2, ?, 'account', ?, 'account.opened.v1', ?, 'pending', ?, 0, 0, 0)`,
        args: [event.eventId, acc, JSON.stringify(event), Date.parse(event.occurredAt)],
      });
      // … and the pass of another relay of the deployment (on other partitions, or a bounded `npm run relay`) gives
      // it its partition first: every relay pass starts with this call
      const { givePartitions } = await import('../../src/outbox/outbox-partitions.ts');
      expect(await givePartitions(t.deps.db, t.deps.writer)).toBe(1);
      await append(t, [openedEvent({ accountId: acc, owner: 'next', version: 2 })]);
      await eventually(async () => (await countRows(t.client, 'outbox', "status = 'pending'")) === 0, { timeoutMs: 4000 }).catch(() => undefined);
      const owners = (await readStream(nats().nc, stream)).filter((m) => m.event.aggregateId === acc).map((m) => (m.event.data as { owner: string }).owner);
      expect(owners, 'the owner kept its floor: the restored row stays pending below it and the next event overtook it').toEqual(['restored', 'next']);
    } finally {
      await owner.stop();
    }
  });
});

describe('relay - restored rows while two relays share the partitions', () => {
  it('every restored row is published before the next event of its aggregate, whichever relay gives it its partition', { timeout: 60_000 }, async () => {
    await using t = await createTestDb();
    const stream = ownStream('RESTORETWO');
    for (let i = 0; i < 20; i++) await append(t, [openedEvent({ accountId: `acc-${crypto.randomUUID()}`, owner: `owner-${i}` })]);
    const a = runRelay(relayDeps(t, nats().url, { stream, partitions: PARTITIONS, lease: { owner: 'relay-a', ttlMs: 3000 } }), 40_000);
    const b = runRelay(relayDeps(t, nats().url, { stream, partitions: PARTITIONS, lease: { owner: 'relay-b', ttlMs: 3000 } }), 40_000);
    const restored: string[] = [];
    try {
      await eventually(async () => (await countRows(t.client, 'outbox', "status = 'sent'")) === 20, { timeoutMs: 10_000, what: 'the first rows sent' });
      await eventually(
        async () => (await countRows(t.client, 'leases', "owner = 'relay-a'")) === 8 && (await countRows(t.client, 'leases', "owner = 'relay-b'")) === 8,
        {
          timeoutMs: 10_000,
          what: 'the partitions shared 8 and 8',
        },
      );
      await new Promise((r) => setTimeout(r, 300)); // idle passes: each relay's floor is the highest seq
      for (let seq = 2; seq <= 9; seq++) {
        const acc = `acc-${crypto.randomUUID()}`;
        restored.push(acc);
        const event = openedEvent({ accountId: acc, owner: 'restored' });
        // compaction removed the sent row; a restore puts a lost row back under its seq (unmarked: its hash is cleared)
        await t.client.batch(
          [
            { sql: 'DELETE FROM outbox WHERE seq = ?', args: [seq] },
            {
              sql: `INSERT INTO outbox (seq, id, aggregate_type, aggregate_id, message_type, payload, status, occurred_at, available_at, aggregate_hash, partition)
                    VALUES (?, ?, 'account', ?, 'account.opened.v1', ?, 'pending', ?, 0, 0, 0)`,
              args: [seq, event.eventId, acc, JSON.stringify(event), Date.parse(event.occurredAt)],
            },
          ],
          'write',
        );
        await new Promise((r) => setTimeout(r, 150));
        await append(t, [openedEvent({ accountId: acc, owner: 'next', version: 2 })]);
      }
      await eventually(async () => (await countRows(t.client, 'outbox', "status = 'pending'")) === 0, { timeoutMs: 3000 }).catch(() => undefined);
    } finally {
      await Promise.all([a.stop(), b.stop()]);
    }
    const inStream = await readStream(nats().nc, stream);
    const broken = restored
      .map((acc) => ({ acc, owners: inStream.filter((m) => m.event.aggregateId === acc).map((m) => (m.event.data as { owner: string }).owner) }))
      .filter((x) => x.owners.join() !== 'restored,next');
    expect(broken, 'aggregates whose restored row was overtaken by their next event (or never published)').toEqual([]);
  });
});
