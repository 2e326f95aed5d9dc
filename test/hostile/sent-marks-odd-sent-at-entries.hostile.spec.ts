// Outbox_sent entries a script (or a process with a broken clock) wrote with a sent_at far in the future,
// past 2^53, negative, or as text. The relay's fold must take them in without failing, publish nothing recorded, and
// compaction by age afterwards must never delete a pending row.
import { describe, expect, it } from 'vitest';
import { compactOutbox } from '../../src/outbox/compact-outbox.ts';
import { readOutboxStats } from '../../src/outbox/outbox-stats.ts';
import { accountCommands } from '../support/accounts.ts';
import { countRows, createTestDb } from '../support/db.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { freshStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

describe('odd sent_at values in outbox_sent, folded', () => {
  it('folds them without failing the relay; compaction afterwards keeps every pending row', { timeout: 20_000 }, async () => {
    await using t = await createTestDb();
    const cmds = accountCommands(t.deps);
    await cmds.openMany(9);
    const rows = (await t.client.execute('SELECT seq, id FROM outbox ORDER BY seq')).rows.map((r) => ({ seq: Number(r.seq), id: String(r.id) }));
    const odd = ["'2024-01-01T00:00:00Z'", '9007199254740993', '4102444800000', '-5', "x'00ff'", '1e300'];
    // the first six rows recorded as sent (already published) with odd stamps; the other three not
    const stream = await freshStream(nats().nc, 'ODDSENTAT');
    for (const [i, v] of odd.entries())
      await t.client.execute({ sql: `INSERT INTO outbox_sent (seq, id, sent_at) VALUES (?, ?, ${v})`, args: [rows[i]!.seq, rows[i]!.id] });
    // a pending row still waiting under an entry of a past stamp keeps the stats sane
    const before = await readOutboxStats(t.deps.db, new Date());
    expect(before).toMatchObject({ pending: 3, failed: 0, sent: 6 });

    // before any fold: compaction must not touch pending rows, recorded or not
    const cut = Date.now() + 60_000;
    const clock = () => new Date(cut + 120_000);
    const c0 = await compactOutbox({ writer: t.deps.writer, clock }, { cutoffMs: cut, batch: 2 });
    expect(c0.deleted).toBe(0);

    const summary = await drainOutbox(relayDeps(t, nats().url, { stream }));
    expect({ published: summary.published, duplicates: summary.duplicates }).toEqual({ published: 3, duplicates: 0 });
    expect(await countRows(t.client, 'outbox_sent'), 'the entries were folded').toBe(0);
    expect(await countRows(t.client, 'outbox', "status = 'sent'")).toBe(9);
    const ids = (await readStream(nats().nc, stream)).map((m) => m.headers['Nats-Msg-Id']);
    expect(ids).toEqual(rows.slice(6).map((r) => r.id));

    // three new rows arrive, pending; compaction by age must delete only sent rows with a stamp before the cutoff
    await cmds.openMany(3);
    const c1 = await compactOutbox({ writer: t.deps.writer, clock }, { cutoffMs: cut, batch: 2 });
    expect(await countRows(t.client, 'outbox', "status = 'pending'")).toBe(3);
    // the three the relay marked at its own time, and the one stamped -5, are before the cutoff
    expect(c1.deleted).toBeGreaterThanOrEqual(4);
    expect(await readOutboxStats(t.deps.db, new Date())).toMatchObject({ pending: 3, failed: 0, sent: 9 });
  });
});
