// One aggregate with many events spread over many batches while the relay records its marks apart;
// a middle event fails once with a permanent publish error, then succeeds. The stream must hold every aggregate's
// events in outbox order, each once.
import { describe, expect, it } from 'vitest';
import { outboxOrder, streamOrder } from '../support/aggregate-order.ts';
import { accountCommands } from '../support/accounts.ts';
import { countRows, createTestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { relayDeps, runRelay } from '../support/relay.ts';
import { freshStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

describe('an aggregate reordered under a recorded backlog', () => {
  it.each([
    ['the 20th event of the long aggregate fails once', [20]],
    ['two of its middle events each fail once', [12, 27]],
  ])('%s: stream order equals outbox order for every aggregate', { timeout: 20_000 }, async (_label, failAt) => {
    await using t = await createTestDb();
    await t.client.execute('CREATE TABLE recorded_log (seq INTEGER)');
    await t.client.execute('CREATE TRIGGER recorded_inserts AFTER INSERT ON outbox_sent BEGIN INSERT INTO recorded_log VALUES (NEW.seq); END');
    const cmds = accountCommands(t.deps);
    const [long] = await cmds.openMany(1);
    const others = await cmds.openMany(10);
    // the long aggregate's deposits interleaved with the others' so that it spans many batches
    for (let i = 0; i < 40; i++) {
      await cmds.deposit(long!, i + 1);
      if (i % 4 === 0) await Promise.all(others.map((o) => cmds.deposit(o, 1)));
    }
    const longIds = (await t.client.execute({ sql: 'SELECT id FROM outbox WHERE aggregate_id = ? ORDER BY seq', args: [long!] })).rows.map((r) => String(r.id));
    const failing = new Set(failAt.map((i) => longIds[i]!));
    const failedOnce = new Set<string>();
    const stream = await freshStream(nats().nc, 'ORDERUNDERBACKLOG');
    const deps = relayDeps(t, nats().url, {
      stream,
      settings: { batch: 5 },
      faults: {
        beforePublish: (row) => {
          if (failing.has(row.id) && !failedOnce.has(row.id)) {
            failedOnce.add(row.id);
            return new Error('permanent: rejected once by the test');
          }
          return undefined;
        },
      },
    });
    const total = await countRows(t.client, 'outbox');
    const relay = runRelay(deps, 20_000);
    try {
      await eventually(async () => (await countRows(t.client, 'outbox', "status = 'sent'")) === total && (await countRows(t.client, 'outbox_sent')) === 0, {
        timeoutMs: 15_000,
        what: 'every row sent and folded',
      });
    } finally {
      await relay.stop();
    }
    expect(failedOnce.size).toBe(failing.size);
    expect(await countRows(t.client, 'recorded_log')).toBeGreaterThan(0);
    // marks were still being recorded apart around the failing rows (entries on both sides of them)
    for (const id of failing) {
      const seq = Number((await t.client.execute({ sql: 'SELECT seq FROM outbox WHERE id = ?', args: [id] })).rows[0]!.seq);
      expect(await countRows(t.client, 'recorded_log', 'seq < ?', [seq]), `entries below ${id}`).toBeGreaterThan(0);
      expect(await countRows(t.client, 'recorded_log', 'seq > ?', [seq]), `entries above ${id}`).toBeGreaterThan(0);
    }
    const msgs = await readStream(nats().nc, stream);
    const ids = msgs.map((m) => m.headers['Nats-Msg-Id']);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.length).toBe(total);
    const want = await outboxOrder(t);
    const got = streamOrder(msgs);
    for (const [agg, order] of want) expect(got.get(agg), `order of ${agg}`).toEqual(order);
  });
});
