// Outbox compaction over `sent` rows a script or a restore stored with a sent_at that is no time in ms (nanoseconds,
// an integer past 2^53 — the driver refuses it as a number). Such a row at the end of a window must neither fail the
// run (the relay role's scheduled compaction and the CLI would otherwise fail there on every run, for good, while the
// old ordinary rows piled up) nor be deleted: its stamp says nothing of when it was sent. Real libSQL files, a real
// CLI process.
import { describe, expect, it } from 'vitest';
import { compactOutbox } from '../../src/outbox/compact-outbox.ts';
import { useCliWorkspaces } from '../support/cli-workspace.ts';
import { createTestDb } from '../support/db.ts';

const NANOS = BigInt(Date.UTC(2026, 0, 1)) * 1_000_000n; // a time in ns: past 2^53
const OLD = 1000; // sent long ago, in ms

/** Sent rows s0 … s(n-1), all old but s1, whose sent_at is in nanoseconds (the end of the first window of 2). */
const sentRows = (n: number) =>
  `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, occurred_at, available_at, sent_at) VALUES ${Array.from(
    { length: n },
    (_, i) => `('s${i}', 'order', 'a${i}', 'order.placed.v1', '{}', 'sent', 0, 0, ${i === 1 ? NANOS : OLD})`,
  ).join(', ')}`;

const workspace = useCliWorkspaces();

describe('outbox compaction - a sent row whose sent_at is nanoseconds', () => {
  it('compactOutbox (the relay role schedule) completes and deletes the old ordinary sent rows around it', async () => {
    await using t = await createTestDb();
    await t.client.execute(sentRows(6));
    const run = compactOutbox({ writer: t.deps.writer, clock: () => new Date() }, { cutoffMs: Date.now() - 86_400_000, batch: 2 });
    await expect(run).resolves.toMatchObject({ deleted: 5 });
    const left = (await t.client.execute('SELECT id FROM outbox ORDER BY seq')).rows.map((r) => r.id);
    expect(left).not.toContain('s0');
    expect(left).not.toContain('s5');
  });

  it('npm run cli -- outbox:compact exits 0 and deletes the old ordinary sent rows around it', { timeout: 20_000 }, async () => {
    const w = workspace();
    expect((await w.cli(['outbox:stats'])).code).toBe(0); // creates and migrates the database
    const db = w.open(w.env.DATABASE_URL);
    await db.execute(sentRows(6));
    const out = await w.cli(['outbox:compact', '--older-than', '1d', '--batch', '2']);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stdout).toContain('deleted 5 sent row(s)');
  });
});
