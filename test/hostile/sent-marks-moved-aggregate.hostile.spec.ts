// A recorded row (pending, its entry in outbox_sent) that a script moves to another aggregate: not published again, and it holds no aggregate for good.
import { describe, expect, it } from 'vitest';
import { createAckPublisher } from '../../src/nats/ack-publisher.ts';
import { readOutboxStats } from '../../src/outbox/outbox-stats.ts';
import { relayPass } from '../../src/outbox/relay-pass.ts';
import { accountCommands } from '../support/accounts.ts';
import { countRows, createTestDb } from '../support/db.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { freshStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

describe('relay - a recorded row moved to another aggregate', () => {
  it('a recorded row whose aggregate_id a script changes (hash cleared) is not republished and does not hold the new aggregate for good', async () => {
    await using t = await createTestDb();
    await accountCommands(t.deps).openMany(12);
    const stream = await freshStream(nats().nc, 'ADVMOVE');
    const deps = relayDeps(t, nats().url, { stream, settings: { batch: 6 } });
    expect(await relayPass(deps, createAckPublisher(nats().nc, 5000), { markLater: 1_000_000 })).toMatchObject({ published: 6, more: true });
    const { rows } = await t.client.execute('SELECT seq, aggregate_id FROM outbox ORDER BY seq');
    const last = String(rows.at(-1)!.aggregate_id);
    await t.client.execute({ sql: 'UPDATE outbox SET aggregate_id = ? WHERE seq = ?', args: [last, Number(rows[0]!.seq)] });
    expect(await countRows(t.client, 'outbox', 'aggregate_hash IS NULL')).toBe(1);
    expect(await readOutboxStats(t.deps.db, new Date())).toMatchObject({ pending: 6, sent: 6 });
    const s = await drainOutbox(deps);
    expect({ published: s.published, duplicates: s.duplicates }).toEqual({ published: 6, duplicates: 0 });
    expect(await readStream(nats().nc, stream)).toHaveLength(12);
    expect(await countRows(t.client, 'outbox', "status = 'sent'")).toBe(12);
    expect(await countRows(t.client, 'outbox_sent')).toBe(0);
    expect(await readOutboxStats(t.deps.db, new Date())).toMatchObject({ pending: 0, failed: 0, sent: 12, oldestPendingAgeMs: 0 });
  });
});
