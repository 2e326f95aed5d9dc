import type { Client, InArgs, InStatement, InValue } from '@libsql/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../../src/app.ts';
import { createDatabase } from '../../src/db/open-database.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { createOpsRoutes } from '../../src/ops/ops.routes.ts';
import { compactOutbox } from '../../src/outbox/compact-outbox.ts';
import { registerOutboxGauges } from '../../src/outbox/outbox-metrics.ts';
import { createTestDb, type TestDb } from '../support/db.ts';

const SENT = 1_000_000;
const NOW = Date.parse('2026-06-01T00:00:00.000Z');

type Seen = { sql: string; args: InValue[] };

/** The client, recording every statement run through `execute` (drizzle's queries included). */
function recording(client: Client, seen: Seen[]): Client {
  const positional = (args: InArgs | undefined): InValue[] => (Array.isArray(args) ? args : Object.values(args ?? {}));
  return new Proxy(client, {
    get(target, key, receiver) {
      if (key !== 'execute') return Reflect.get(target, key, receiver);
      return (stmt: InStatement | string, args?: InArgs) => {
        const statement: InStatement = typeof stmt === 'string' ? { sql: stmt, args: args ?? [] } : stmt;
        seen.push({ sql: statement.sql, args: positional(statement.args) });
        return target.execute(statement);
      };
    },
  });
}

let t: TestDb;
beforeAll(async () => {
  t = await createTestDb();
  // a year of published events, in one statement; then a small backlog
  await t.client.execute(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${SENT})
    INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, occurred_at, available_at, sent_at)
    SELECT 'sent-' || i, 'account', 'a' || (i % 1000), 'account.opened.v1', '{}', 'sent', i, i, i FROM n`);
  await t.client.execute(`INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, attempts, occurred_at, available_at) VALUES
    ('p1', 'account', 'x', 'account.opened.v1', '{}', 'pending', 0, ${NOW - 5000}, 0), ('p2', 'account', 'y', 'account.opened.v1', '{}', 'pending', 0, ${NOW - 1000}, 0),
    ('f1', 'account', 'z', 'account.opened.v1', '{}', 'failed', 5, 0, 0)`);
  await t.client.execute('ANALYZE');
}, 120_000);
afterAll(() => t?.close());

describe('outbox - what /outbox/stats and a /metrics scrape cost on a large table', () => {
  it('with 1 M sent rows, every statement they run searches an index and none scans the outbox or ranges over its sent rows', async () => {
    const seen: Seen[] = [];
    const db = createDatabase(recording(t.client, seen));
    const deps = { ...t.deps, db, clock: () => new Date(NOW) };
    const metrics = createMetrics();
    registerOutboxGauges(metrics, db, deps.clock);
    const app = createApp(deps, {
      extend: (a) => a.route('/', createOpsRoutes({ db, clock: deps.clock, metrics, outboxCommitted: deps.outboxCommitted, writer: deps.writer })),
    });

    const stats = await app.request('/outbox/stats');
    expect(await stats.json()).toEqual({ pending: 2, failed: 1, sent: SENT, oldestPendingAgeMs: 5000 });
    const scrape = await (await app.request('/metrics')).text();
    expect(scrape).toMatch(/^outbox_pending_messages 2$/m);
    expect(scrape).toMatch(/^outbox_failed_messages 1$/m);
    expect(scrape).toMatch(/^outbox_oldest_pending_age_seconds 5$/m);

    expect(seen.length).toBeGreaterThan(0);
    for (const { sql, args } of seen) {
      const plan = (await t.client.execute({ sql: `EXPLAIN QUERY PLAN ${sql}`, args })).rows.map((r) => String(r.detail));
      const shown = `${sql}\n${plan.join('\n')}`;
      expect(
        plan.some((d) => /^SCAN outbox\b/.test(d)),
        shown,
      ).toBe(false);
      expect(
        // a bare `SEARCH outbox` is a seek on the rowid (max(seq)), as cheap as an index search
        plan.filter((d) => /\boutbox\b/.test(d)).every((d) => /^SEARCH outbox( USING (COVERING )?INDEX |$)/.test(d)),
        shown,
      ).toBe(true);
      // an index range over the sent rows is still O(table): counting them is what this guards against
      expect(/'sent'/.test(sql) || args.includes('sent'), shown).toBe(false);
    }
  });

  it('sent keeps counting rows that compaction deleted: it is every row appended that is neither pending nor failed', async () => {
    await using small = await createTestDb();
    await small.client.execute(`INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, occurred_at, available_at, sent_at) VALUES
      ('s1', 'account', 'a', 'account.opened.v1', '{}', 'sent', 0, 0, 1), ('s2', 'account', 'b', 'account.opened.v1', '{}', 'sent', 0, 0, 1),
      ('p1', 'account', 'c', 'account.opened.v1', '{}', 'pending', ${NOW}, 0, NULL)`);
    expect(await compactOutbox(small.deps, { cutoffMs: NOW })).toEqual({ deleted: 2, batches: 1 });
    const app = createApp({ ...small.deps, clock: () => new Date(NOW) });
    expect(await (await app.request('/outbox/stats')).json()).toEqual({ pending: 1, failed: 0, sent: 2, oldestPendingAgeMs: 0 });
  });
});
