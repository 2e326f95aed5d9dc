// The relay reads rows above seq 0 only (its floor starts at 0, and a due retry resets it to 0), and GET
// /admin/outbox/failed pages from `seq > 0` too: a row a script stored under seq 0 or a negative seq would stay
// pending for ever, never published, parked or listed. Migration 0009_outbox_seq_range refuses such a seq. Real libSQL
// file, real relay, real nats-server.
import { describe, expect, it } from 'vitest';
import { accountCommands, creditedEvent } from '../support/accounts.ts';
import { createTestDb } from '../support/db.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { ownStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

describe('outbox - a row a script stores under a seq of 0 or below', () => {
  it.each([0, -1])('seq %i is either refused at INSERT or published by the relay, never left pending for ever', { timeout: 20_000 }, async (seq) => {
    await using t = await createTestDb();
    const stream = ownStream(`SEQZ${seq + 5}`);
    await accountCommands(t.deps).openMany(2);
    const e = creditedEvent({ owner: 'script' });
    let stored = true;
    try {
      await t.client.execute({
        sql: `INSERT INTO outbox (seq, id, aggregate_type, aggregate_id, message_type, payload, status, attempts, occurred_at, available_at)
              VALUES (?, ?, 'account', ?, ?, ?, 'pending', 0, ?, 0)`,
        args: [seq, e.eventId, e.aggregateId, e.type, JSON.stringify(e), Date.parse(e.occurredAt)],
      });
    } catch (error) {
      expect(String(error)).toMatch(/seq/);
      stored = false;
    }
    await drainOutbox(relayDeps(t, nats().url, { stream }));
    const published = (await readStream(nats().nc, stream)).map((m) => m.event.eventId);
    const left = (await t.client.execute({ sql: 'SELECT status FROM outbox WHERE id = ?', args: [e.eventId] })).rows.map((r) => r.status);
    expect({ published: published.includes(e.eventId), left }).toEqual(stored ? { published: true, left: ['sent'] } : { published: false, left: [] });
    expect(published).toHaveLength(stored ? 3 : 2);
  });
});
