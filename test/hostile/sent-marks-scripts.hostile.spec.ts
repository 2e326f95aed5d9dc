// Marks recorded apart (outbox_sent), and marks of either kind, against what scripts do to the outbox.
import { describe, expect, it } from 'vitest';
import { createAckPublisher } from '../../src/nats/ack-publisher.ts';
import { relayPass } from '../../src/outbox/relay-pass.ts';
import { accountCommands } from '../support/accounts.ts';
import { countRows, createTestDb } from '../support/db.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { freshStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

describe('relay - marks recorded apart, against scripts', () => {
  it('a recorded row moved to another seq by a script (UPDATE of the rowid alias) is not published again', async () => {
    await using t = await createTestDb();
    await accountCommands(t.deps).openMany(3);
    const stream = await freshStream(nats().nc, 'MOVED');
    const deps = relayDeps(t, nats().url, { stream, settings: { batch: 3 } });
    const first = await relayPass(deps, createAckPublisher(nats().nc, 5000), { markLater: 1_000_000 });
    expect(first).toMatchObject({ published: 3, more: true });
    // before this change the row would be `sent` here; a script renumbers it (e.g. compacting seqs)
    await t.client.execute('UPDATE outbox SET seq = seq + 1000 WHERE seq = (SELECT min(seq) FROM outbox)');
    const summary = await drainOutbox(deps);
    expect({ published: summary.published, duplicates: summary.duplicates }, 'the moved row was published again').toEqual({ published: 0, duplicates: 0 });
    expect(await readStream(nats().nc, stream)).toHaveLength(3);
  });

  it.each([
    ['marked by rewriting the row (a partial batch)', 50],
    ['recorded apart (a full batch)', 3],
  ])(
    'leaves pending a row stored again under its seq with another event between its publish and its mark, and that event is published: %s',
    async (_label, batch) => {
      await using t = await createTestDb();
      await accountCommands(t.deps).openMany(3);
      const stream = await freshStream(nats().nc, 'SWAP');
      const rows = (await t.client.execute('SELECT seq, id FROM outbox ORDER BY seq')).rows.map((r) => ({ seq: Number(r.seq), id: String(r.id) }));
      const replaced = rows[1]!;
      const newId = crypto.randomUUID();
      const deps = relayDeps(t, nats().url, {
        stream,
        settings: { batch },
        faults: {
          // a restore (or a script) stores another event under the seq after the PubAck and before the mark
          afterPubAcks: async () => {
            await t.client.execute({
              sql: `INSERT OR REPLACE INTO outbox (seq, id, aggregate_type, aggregate_id, message_type, payload, headers, status, attempts, occurred_at, available_at, aggregate_hash, partition, payload_validated)
                  SELECT seq, ?1, aggregate_type, aggregate_id, message_type, replace(payload, id, ?1), headers, 'pending', 0, occurred_at, available_at, aggregate_hash, partition, 0
                  FROM outbox WHERE seq = ?2`,
              args: [newId, replaced.seq],
            });
          },
        },
      });
      const first = await relayPass(deps, createAckPublisher(nats().nc, 5000), { markLater: 1_000_000 });
      expect(first.published).toBe(3);
      const stored = await t.client.execute({ sql: 'SELECT id, status FROM outbox WHERE seq = ?', args: [replaced.seq] });
      expect({ id: String(stored.rows[0]!.id), status: String(stored.rows[0]!.status) }).toEqual({ id: newId, status: 'pending' });
      expect(await countRows(t.client, 'outbox_sent', 'id = ?', [newId])).toBe(0);

      const summary = await drainOutbox(relayDeps(t, nats().url, { stream }));
      expect(summary).toMatchObject({ published: 1, duplicates: 0 });
      expect((await readStream(nats().nc, stream)).map((m) => m.headers['Nats-Msg-Id'])).toEqual([...rows.map((r) => r.id), newId]);
    },
  );
});
