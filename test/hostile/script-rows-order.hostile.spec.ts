// Outbox rows written by a script, a restore or an older release, whose bookkeeping columns (partition, attempts,
// seq) say something appendToOutbox never writes. Whatever they say, the relay must never publish a later event of
// an aggregate before an earlier pending one, and must not leave a pending row unread while it runs.
// Real libSQL file, real nats-server, the relay as the service runs it (leases over 16 partitions).
import { describe, expect, it } from 'vitest';
import { aggregateHash } from '../../src/outbox/partition.ts';
import { openedEvent } from '../support/accounts.ts';
import { countRows, createTestDb } from '../support/db.ts';
import { drainOutbox, relayDeps, runRelay } from '../support/relay.ts';
import { eventually } from '../support/eventually.ts';
import { insertScriptRow } from '../support/stored-row.ts';
import { ownStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();
const PARTITIONS = 16;

/** The hash and partition appendToOutbox would store for an account. */
const placed = (accountId: string) => {
  const hash = aggregateHash('account', accountId);
  return { aggregate_hash: hash, partition: hash % PARTITIONS };
};

/** The owners of `accountId`'s events in stream order. */
async function ownersInStream(stream: ReturnType<typeof ownStream>, accountId: string): Promise<string[]> {
  return (await readStream(nats().nc, stream)).filter((m) => m.event.aggregateId === accountId).map((m) => (m.event.data as { owner: string }).owner);
}

describe('relay - a script row the relay cannot read now still holds back the later events of its aggregate', () => {
  it('a row stored in a partition no relay leases (999 of 16) is not overtaken by the next event of its aggregate', async () => {
    await using t = await createTestDb();
    const stream = ownStream('ORDER');
    const acc = `acc-${crypto.randomUUID()}`;
    await insertScriptRow(t, openedEvent({ accountId: acc, owner: 'first' }), { aggregate_hash: aggregateHash('account', acc), partition: 999 });
    await insertScriptRow(t, openedEvent({ accountId: acc, owner: 'second', version: 2 }), placed(acc));
    await drainOutbox(relayDeps(t, nats().url, { stream, partitions: PARTITIONS }));
    // published in order, or the later one held back behind the unreadable one: never the later one alone
    expect([[], ['first'], ['first', 'second']]).toContainEqual(await ownersInStream(stream, acc));
  });

  it('a pending row with a negative attempts count and a far available_at is not overtaken by the next event of its aggregate', async () => {
    await using t = await createTestDb();
    const stream = ownStream('ORDER');
    const acc = `acc-${crypto.randomUUID()}`;
    await insertScriptRow(t, openedEvent({ accountId: acc, owner: 'first' }), { ...placed(acc), attempts: -1, available_at: Date.now() + 86_400_000 });
    await insertScriptRow(t, openedEvent({ accountId: acc, owner: 'second', version: 2 }), placed(acc));
    await drainOutbox(relayDeps(t, nats().url, { stream, partitions: PARTITIONS }));
    expect([[], ['first'], ['first', 'second']]).toContainEqual(await ownersInStream(stream, acc));
  });
});

describe('relay - a row restored with its original seq', () => {
  it('is published by a running, idle relay before the next event of its aggregate, although its seq is below what the relay already read', async () => {
    await using t = await createTestDb();
    const stream = ownStream('ORDER');
    for (let i = 0; i < 5; i++) await insertScriptRow(t, openedEvent({ owner: `owner-${i}` }));
    const running = runRelay(relayDeps(t, nats().url, { stream, partitions: PARTITIONS, lease: { owner: 'restore-test', ttlMs: 60_000 } }), 20_000);
    try {
      await eventually(async () => (await countRows(t.client, 'outbox', "status = 'sent'")) === 5, { timeoutMs: 5000, what: 'the first rows sent' });
      // compaction deleted the sent row 2; a restore copies a lost pending row back with every column, its seq included
      const acc = `acc-${crypto.randomUUID()}`;
      await t.client.execute('DELETE FROM outbox WHERE seq = 2');
      await insertScriptRow(t, openedEvent({ accountId: acc, owner: 'restored' }), { seq: 2, ...placed(acc) });
      await new Promise((r) => setTimeout(r, 300));
      // the aggregate's next event, appended as usual
      await insertScriptRow(t, openedEvent({ accountId: acc, owner: 'next', version: 2 }), placed(acc));
      await eventually(async () => (await countRows(t.client, 'outbox', "status = 'pending'")) === 0, { timeoutMs: 2000 }).catch(() => undefined);
      expect(await ownersInStream(stream, acc)).toEqual(['restored', 'next']);
    } finally {
      await running.stop();
    }
  });
});
