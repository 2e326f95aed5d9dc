import type { Client } from '@libsql/client';
import { describe, expect, it } from 'vitest';
import { compactIdempotencyKeys } from '../../src/http/idempotency-retention.ts';
import { CLOCK_SKEW_MARGIN_MS, compactOutbox } from '../../src/outbox/compact-outbox.ts';
import { createTestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { postJson } from '../support/http.ts';
import { createTestService } from '../support/service.ts';

const NOW = Date.parse('2026-06-01T00:00:00.000Z');
const HOUR = 3_600_000;
const FAST = { compactionSchedule: { firstAfterMs: 10, everyMs: 20 } };
/** Nothing listens there: the relay role runs (and backs off), no broker is needed to compact. */
const NO_BROKER = 'nats://127.0.0.1:1';

/** Outbox rows in seq order: `sent` rows with the given sent_at, or pending/failed rows (never due, so never published). */
async function insertOutbox(client: Client, rows: Array<{ id: string; status: 'sent' | 'pending' | 'failed'; sentAt?: number }>): Promise<void> {
  for (const r of rows) {
    await client.execute({
      sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, occurred_at, available_at, sent_at) VALUES (?, 'account', ?, 'account.opened.v1', '{}', ?, 0, ?, ?)`,
      args: [r.id, r.id, r.status, Number.MAX_SAFE_INTEGER, r.sentAt ?? null],
    });
  }
}

const ids = async (client: Client, table = 'outbox', column = 'id') =>
  (await client.execute(`SELECT ${column} FROM ${table} ORDER BY ${table === 'outbox' ? 'seq' : column}`)).rows.map((r) => String(r[0]));

async function insertKeys(client: Client, keys: Array<{ key: string; createdAt: number }>): Promise<void> {
  for (const k of keys) {
    await client.execute({
      sql: `INSERT INTO idempotency_keys (key, fingerprint, status_code, response_body, location, created_at) VALUES (?, 'f', 201, '{}', NULL, ?)`,
      args: [k.key, k.createdAt],
    });
  }
}

describe('outbox - compaction', () => {
  it('walks sent rows in seq order and stops at the first window ending in a retained row, skipping a young straggler below it', async () => {
    await using t = await createTestDb({ deps: { clock: () => new Date(NOW) } });
    const cutoff = NOW - HOUR;
    await insertOutbox(t.client, [
      { id: 'straggler', status: 'sent', sentAt: NOW }, // re-queued from failed and sent late: young, low seq
      ...Array.from({ length: 9 }, (_, i) => ({ id: `old-${i}`, status: 'sent' as const, sentAt: 1000 + i })),
      { id: 'pending', status: 'pending' },
      { id: 'failed', status: 'failed' },
      ...Array.from({ length: 8 }, (_, i) => ({ id: `new-${i}`, status: 'sent' as const, sentAt: NOW })),
      { id: 'beyond', status: 'sent', sentAt: 1000 }, // old, but past the boundary: the walk never gets there
    ]);
    const progress: number[] = [];
    const result = await compactOutbox(t.deps, { cutoffMs: cutoff, batch: 4, onBatch: (p) => progress.push(p.deleted) });
    expect(result).toEqual({ deleted: 9, batches: 3 });
    expect(progress).toEqual([3, 7, 9]);
    expect(await ids(t.client)).toEqual(['straggler', 'pending', 'failed', ...Array.from({ length: 8 }, (_, i) => `new-${i}`), 'beyond']);
  });

  it('walks past a window ending in a row stamped later than its own clock (a fast relay clock), but stops at one stamped within the skew margin', async () => {
    await using t = await createTestDb({ deps: { clock: () => new Date(NOW) } });
    await insertOutbox(t.client, [
      ...Array.from({ length: 4 }, (_, i) => ({ id: `future-${i}`, status: 'sent' as const, sentAt: NOW + 365 * 24 * HOUR })),
      ...Array.from({ length: 4 }, (_, i) => ({ id: `old-${i}`, status: 'sent' as const, sentAt: 1000 + i })),
      ...Array.from({ length: 4 }, (_, i) => ({ id: `ahead-${i}`, status: 'sent' as const, sentAt: NOW + CLOCK_SKEW_MARGIN_MS })),
      { id: 'beyond', status: 'sent', sentAt: 1000 }, // old, but past the boundary: the walk never gets there
    ]);
    const result = await compactOutbox(t.deps, { cutoffMs: NOW - HOUR, batch: 4 });
    expect(result).toEqual({ deleted: 4, batches: 1 });
    expect(await ids(t.client)).toEqual([
      ...Array.from({ length: 4 }, (_, i) => `future-${i}`),
      ...Array.from({ length: 4 }, (_, i) => `ahead-${i}`),
      'beyond',
    ]);
  });

  it('every statement of a compaction batch reads a range of idx_outbox_status_seq', async () => {
    await using t = await createTestDb();
    for (const [sql, args] of [
      ["SELECT seq, sent_at FROM outbox WHERE status = 'sent' AND seq > ? ORDER BY seq LIMIT 1 OFFSET ?", [0, 9_999]],
      ["DELETE FROM outbox WHERE status = 'sent' AND seq > ? AND seq <= ? AND sent_at < ?", [0, 10_000, NOW]],
    ] as const) {
      const plan = (await t.client.execute({ sql: `EXPLAIN QUERY PLAN ${sql}`, args: [...args] })).rows.map((r) => String(r.detail));
      expect(plan.join('\n')).toMatch(/^SEARCH outbox USING (COVERING )?INDEX idx_outbox_status_seq \(status=\? AND seq>\?/m);
      expect(
        plan.some((d) => /^SCAN /.test(d)),
        plan.join('\n'),
      ).toBe(false);
    }
  });

  it('the relay role deletes sent rows older than OUTBOX_RETENTION on its own timer, never pending or failed rows', async () => {
    await using s = await createTestService({ ROLES: 'relay', NATS_URL: NO_BROKER, OUTBOX_RETENTION: '1h' }, { ...FAST, clock: () => new Date(NOW) });
    await insertOutbox(s.client, [
      ...Array.from({ length: 5 }, (_, i) => ({ id: `old-${i}`, status: 'sent' as const, sentAt: NOW - 2 * HOUR })),
      { id: 'pending', status: 'pending' },
      { id: 'failed', status: 'failed' },
      { id: 'recent', status: 'sent', sentAt: NOW - HOUR / 2 },
    ]);
    await eventually(async () => (await ids(s.client)).length === 3, { timeoutMs: 10_000, what: 'the old sent rows compacted' });
    expect(await ids(s.client)).toEqual(['pending', 'failed', 'recent']);
  });
});

describe('idempotency keys - retention', () => {
  it('compaction forgets keys stored before the cutoff, a bounded batch per transaction, and keeps the rest', async () => {
    await using t = await createTestDb();
    await insertKeys(t.client, [
      ...Array.from({ length: 7 }, (_, i) => ({ key: `old-${i}`, createdAt: NOW - 25 * HOUR - i })),
      { key: 'young', createdAt: NOW - 23 * HOUR },
    ]);
    const progress: number[] = [];
    const result = await compactIdempotencyKeys(
      { writer: t.deps.writer, clock: () => new Date(NOW) },
      { olderThanMs: 24 * HOUR, batch: 3, onBatch: (p) => progress.push(p.deleted) },
    );
    expect(result).toEqual({ deleted: 7, batches: 3, cutoff: NOW - 24 * HOUR });
    expect(progress).toEqual([3, 6, 7]);
    expect(await ids(t.client, 'idempotency_keys', 'key')).toEqual(['young']);
  });

  it('compaction finds the oldest keys through idx_idempotency_keys_created_at, never scanning the table', async () => {
    await using t = await createTestDb();
    const plan = await t.client.execute({
      sql: 'EXPLAIN QUERY PLAN DELETE FROM idempotency_keys WHERE key IN (SELECT key FROM idempotency_keys WHERE created_at < ? ORDER BY created_at LIMIT ?)',
      args: [NOW, 10_000],
    });
    const details = plan.rows.map((r) => String(r.detail));
    expect(details.join('\n')).toMatch(/SEARCH idempotency_keys USING (COVERING )?INDEX idx_idempotency_keys_created_at \(created_at<\?\)/);
    expect(
      details.some((d) => /^SCAN |TEMP B-TREE/.test(d)),
      details.join('\n'),
    ).toBe(false);
  });

  it('the api role forgets keys older than IDEMPOTENCY_RETENTION on its own timer; a retry after that runs the command again', async () => {
    let now = NOW;
    await using s = await createTestService({ ROLES: 'api', NATS_URL: NO_BROKER, IDEMPOTENCY_RETENTION: '24h' }, { ...FAST, clock: () => new Date(now) });
    const open = () => postJson(s.app, '/accounts', { owner: 'ann' }, { 'Idempotency-Key': 'k-1' });
    const first = await open();
    expect(first.status).toBe(201);
    expect((await open()).headers.get('Idempotent-Replayed')).toBe('true');
    await insertKeys(s.client, [{ key: 'young', createdAt: NOW + HOUR }]);

    now = NOW + 24 * HOUR + 1;
    await eventually(async () => (await ids(s.client, 'idempotency_keys', 'key')).join() === 'young', { timeoutMs: 10_000, what: 'the old key forgotten' });
    const again = await open();
    expect(again.status).toBe(201);
    expect(again.headers.get('Idempotent-Replayed')).toBeNull();
  });
});
