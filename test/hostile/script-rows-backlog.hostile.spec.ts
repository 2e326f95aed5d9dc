// A backlog larger than a batch (500) drained while a script keeps storing rows of the same aggregates: every row is
// published once, each aggregate's events in the order they were stored. Real libSQL file, real nats-server.
import { describe, expect, it } from 'vitest';
import { countRows, createTestDb, type TestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { relayDeps, runRelay } from '../support/relay.ts';
import { ownStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

/** Stores one unmarked row per (account, version) in one multi-row statement, as a script or a restore does. */
async function insertScriptRows(t: TestDb, rows: Array<{ acc: string; version: number }>): Promise<void> {
  const values: string[] = [];
  const args: Array<string | number> = [];
  for (const { acc, version } of rows) {
    const eventId = crypto.randomUUID();
    const event = {
      eventId,
      type: 'account.opened.v1',
      aggregateType: 'account',
      aggregateId: acc,
      aggregateVersion: version,
      occurredAt: '2026-01-01T00:00:00.000Z',
      data: { accountId: acc, owner: `v${version}` },
    };
    values.push("(?, 'account', ?, 'account.opened.v1', ?, 'pending', 0, 0)");
    args.push(eventId, acc, JSON.stringify(event));
  }
  await t.client.execute({
    sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, occurred_at, available_at) VALUES ${values.join(', ')}`,
    args,
  });
}

describe('relay - script rows stored while a backlog larger than a batch drains', () => {
  it('publishes every row once and each aggregate in stored order', async () => {
    await using t = await createTestDb();
    const stream = ownStream('BACKLOG');
    const accounts = Array.from({ length: 40 }, () => `acc-${crypto.randomUUID()}`);
    let version = 0;
    const round = () => {
      version++;
      return accounts.map((acc) => ({ acc, version }));
    };
    for (let i = 0; i < 30; i++) await insertScriptRows(t, round()); // 1,200 rows
    const running = runRelay(relayDeps(t, nats().url, { stream, settings: { batch: 100 } }), 20_000);
    try {
      for (let i = 0; i < 20; i++) {
        await insertScriptRows(t, round());
        await new Promise((r) => setTimeout(r, 5));
      }
      await eventually(async () => (await countRows(t.client, 'outbox', "status != 'sent'")) === 0, { timeoutMs: 15_000 });
    } finally {
      await running.stop();
    }
    const msgs = await readStream(nats().nc, stream);
    expect(msgs).toHaveLength(accounts.length * version);
    for (const acc of accounts) {
      expect(msgs.filter((m) => m.event.aggregateId === acc).map((m) => m.event.aggregateVersion)).toEqual(Array.from({ length: version }, (_, i) => i + 1));
    }
  });
});
