import type { Client } from '@libsql/client';
import { describe, expect, it } from 'vitest';
import { SENT_PENDING_COUNT } from '../../src/outbox/outbox-stats.ts';
import { FETCH_PENDING_SQL, FOLD_SQL, MARK_LATER_SQL, MARK_SENT_FENCED_SQL } from '../../src/outbox/relay-store.ts';
import { accountCommands } from '../support/accounts.ts';
import { createTestDb, type TestDb } from '../support/db.ts';

/** The relay fetch in its plainest form: what any index change must keep cheap. */
const PLAIN_FETCH = `SELECT * FROM outbox WHERE status = 'pending' AND available_at <= ? ORDER BY seq LIMIT ?`;

const QUERIES: Array<[string, string]> = [
  ['the plain pending fetch', PLAIN_FETCH],
  ["the relay's FETCH_PENDING_SQL", FETCH_PENDING_SQL],
];

async function planOf(client: Client, query: string): Promise<string[]> {
  const rs = await client.execute({ sql: `EXPLAIN QUERY PLAN ${query}`, args: query.includes('?4') ? [Date.now(), 500, '[1,2,3]', 10] : [Date.now(), 500] });
  return rs.rows.map((r) => String(r.detail));
}

/** Fills the outbox through the real command path, then marks some rows sent, some failed and some retrying. */
async function seed(t: TestDb, rows: number, sentShare: number): Promise<void> {
  await accountCommands(t.deps).openMany(rows);
  await t.client.execute({ sql: `UPDATE outbox SET status = 'sent', sent_at = 1 WHERE seq <= ?`, args: [Math.floor(rows * sentShare)] });
  await t.client.execute(`UPDATE outbox SET status = 'failed', attempts = 5 WHERE seq % 17 = 0 AND status = 'pending'`);
  await t.client.execute(`UPDATE outbox SET attempts = 1, available_at = available_at + 60000 WHERE seq % 13 = 0 AND status = 'pending'`);
}

/** The outer scan walks idx_outbox_status_seq (so rows come in seq order without sorting) and nothing is a full scan. */
function expectUsesStatusSeqIndex(plan: string[]): void {
  const shown = plan.join('\n');
  expect(
    plan.some((d) => /^SEARCH \w+ USING (COVERING )?INDEX idx_outbox_status_seq\b/.test(d)),
    shown,
  ).toBe(true);
  expect(
    plan.some((d) => /USE TEMP B-TREE/.test(d)),
    shown,
  ).toBe(false);
  // the list of rows still being marked is a json_each table of at most one batch, not a scan of a table; the
  // database's text encoding is one row of pragma_encoding, read once per statement (an uncorrelated subquery)
  expect(
    plan.some((d) => /^SCAN (?!(json_each|pragma_encoding) VIRTUAL TABLE)/.test(d)),
    shown,
  ).toBe(false);
  expect(
    plan.some((d) => /^CORRELATED SCALAR SUBQUERY/.test(d) && /pragma_encoding/.test(plan[plan.indexOf(d) + 1] ?? '')),
    shown,
  ).toBe(false);
}

describe.each(QUERIES)('outbox - query plan of %s', (_label, query) => {
  it('uses idx_outbox_status_seq with no temp b-tree on an empty outbox', async () => {
    await using t = await createTestDb();
    expectUsesStatusSeqIndex(await planOf(t.client, query));
  });

  it('uses idx_outbox_status_seq with no temp b-tree on an outbox with pending, sent and failed rows (no ANALYZE)', async () => {
    await using t = await createTestDb();
    await seed(t, 300, 0.8);
    const counts = await t.client.execute('SELECT status, count(*) FROM outbox GROUP BY status ORDER BY status');
    expect(counts.rows.map((r) => String(r[0]))).toEqual(['failed', 'pending', 'sent']);
    expect(Number((await t.client.execute(`SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'`)).rows[0]![0])).toBe(0);
    expectUsesStatusSeqIndex(await planOf(t.client, query));
  });

  it('still uses the index after ANALYZE when most rows are already sent (the steady state)', async () => {
    await using t = await createTestDb();
    await seed(t, 300, 0.95);
    await t.client.execute('ANALYZE');
    expectUsesStatusSeqIndex(await planOf(t.client, query));
  });

  it('the check notices a lost index (so a refactor that drops it fails CI)', async () => {
    await using t = await createTestDb();
    await seed(t, 50, 0.5);
    await t.client.execute('DROP INDEX idx_outbox_status_seq');
    await expect(planOf(t.client, query).then(expectUsesStatusSeqIndex)).rejects.toThrow();
  });
});

describe("outbox - the relay's hold-back probe", () => {
  it('looks up earlier retrying rows of the aggregate through idx_outbox_retrying, not a scan', async () => {
    await using t = await createTestDb();
    await seed(t, 100, 0.5);
    const plan = await planOf(t.client, FETCH_PENDING_SQL);
    expect(
      plan.some((d) => /^SEARCH \w+ USING (COVERING )?INDEX idx_outbox_retrying\b/.test(d)),
      plan.join('\n'),
    ).toBe(true);
  });
});

describe("outbox - the relay's floor over a held backlog", () => {
  it('starts the scan above the floor through a range of idx_outbox_status_seq, and asks whether a retry is due through idx_outbox_retry_due', async () => {
    await using t = await createTestDb();
    await seed(t, 100, 0.5);
    const plan = await planOf(t.client, FETCH_PENDING_SQL);
    const shown = plan.join('\n');
    expect(
      plan.some((d) => /^SEARCH o USING INDEX idx_outbox_status_seq \(status=\? AND seq>\?\)/.test(d)),
      shown,
    ).toBe(true);
    expect(
      plan.some((d) => /^SEARCH r USING INDEX idx_outbox_retry_due \(available_at<\?\)/.test(d)),
      shown,
    ).toBe(true);
  });

  it('refuses to run without idx_outbox_retry_due rather than scan the outbox for due retries', async () => {
    await using t = await createTestDb();
    await t.client.execute('DROP INDEX idx_outbox_retry_due');
    await expect(planOf(t.client, FETCH_PENDING_SQL)).rejects.toThrow(/idx_outbox_retry_due/);
  });
});

describe('outbox - backlog counts for /metrics', () => {
  it('counts pending and failed rows through idx_outbox_status_seq, never scanning the sent rows', async () => {
    await using t = await createTestDb();
    for (const status of ['pending', 'failed', 'sent']) {
      const plan = await t.client.execute({ sql: 'EXPLAIN QUERY PLAN SELECT count(*) FROM outbox WHERE status = ?', args: [status] });
      expect(plan.rows.map((r) => String(r.detail)).join('\n')).toMatch(/USING COVERING INDEX idx_outbox_status_seq \(status=\?\)/);
    }
  });
});

describe('outbox - the relay marking rows sent', () => {
  /** The plan of a fenced mark of `seqs` by an owner leasing `partitions` partitions. */
  async function fencedMarkPlan(t: TestDb, seqs: number, partitions: number): Promise<string[]> {
    const fence = JSON.stringify(Array.from({ length: partitions }, (_, p) => [p, 1]));
    const ids = JSON.stringify(Array.from({ length: seqs }, (_, i) => i + 1));
    const eventIds = JSON.stringify(Array.from({ length: seqs }, (_, i) => `event-${i + 1}`));
    const rs = await t.client.execute({ sql: `EXPLAIN QUERY PLAN ${MARK_SENT_FENCED_SQL}`, args: [Date.now(), ids, eventIds, 'relay-a', fence] });
    return rs.rows.map((r) => String(r.detail));
  }

  /** The outbox search of the mark finds rows by their seq alone (the rowid, or (status, seq)), and scans nothing. */
  function expectSeqDrivenSearch(plan: string[]): void {
    const shown = plan.join('\n');
    expect(
      plan.some((d) => /^SEARCH outbox USING (INTEGER PRIMARY KEY \(rowid=\?\)|(COVERING )?INDEX idx_outbox_status_seq \(status=\? AND seq=\?\))$/.test(d)),
      shown,
    ).toBe(true);
    // a search on (status, seq, partition) probes the index once per leased partition for every seq
    expect(shown).not.toMatch(/partition=\?/);
    expect(
      plan.some((d) => /^SCAN outbox\b/.test(d)),
      shown,
    ).toBe(false);
  }

  it.each([
    ['an empty outbox', 0, false],
    ['an outbox with pending, sent and failed rows (no ANALYZE)', 300, false],
    ['the same after ANALYZE', 300, true],
  ])(
    'finds each row by its seq and checks the lease on the row, on %s: the leased partitions do not multiply the index probes',
    async (_label, rows, analyze) => {
      await using t = await createTestDb();
      if (rows > 0) await seed(t, rows, 0.2);
      if (analyze) await t.client.execute('ANALYZE');
      expectSeqDrivenSearch(await fencedMarkPlan(t, 500, 16));
    },
  );

  it('the check notices a fence that lets the partitions drive the search (so a rewrite that does fails CI)', async () => {
    await using t = await createTestDb();
    const sql = MARK_SENT_FENCED_SQL.replace('+partition IN', 'partition IN');
    const rs = await t.client.execute({ sql: `EXPLAIN QUERY PLAN ${sql}`, args: [Date.now(), '[1,2,3]', '["a","b","c"]', 'relay-a', '[[0,1],[1,1]]'] });
    expect(rs.rows.map((r) => String(r.detail)).join('\n')).toMatch(/partition=\?/);
  });
});

describe('outbox - marks recorded apart (outbox_sent)', () => {
  async function planOfStatement(t: TestDb, sql: string, args: Array<string | number>): Promise<string> {
    const rs = await t.client.execute({ sql: `EXPLAIN QUERY PLAN ${sql}`, args });
    return rs.rows.map((r) => String(r.detail)).join('\n');
  }

  it.each([
    ['records each row found by its seq', MARK_LATER_SQL, [1, '[1,2,3]', '["a","b","c"]']],
    ['folds entries into rows found by their seq', FOLD_SQL, [500]],
    ['counts recorded pending rows from the entries, not from every pending row', SENT_PENDING_COUNT, []],
  ] as const)('%s, scanning no outbox rows (backlog and entries both present)', async (_label, sql, args) => {
    await using t = await createTestDb();
    await seed(t, 300, 0.2);
    await t.client.execute("INSERT INTO outbox_sent SELECT seq, id, 1 FROM outbox WHERE status = 'pending' AND seq < 150");
    await t.client.execute('ANALYZE');
    const plan = await planOfStatement(t, sql, [...args]);
    expect(plan).not.toMatch(/^SCAN (outbox|p)\b/m);
    expect(plan).not.toMatch(/INDEX idx_outbox_status_seq \(status=\?\)$/m);
  });
});
