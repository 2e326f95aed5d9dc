import { createClient, type Client } from '@libsql/client';
import { afterEach, describe, expect, it } from 'vitest';
import { createApp } from '../../src/app.ts';
import { createDatabase } from '../../src/db/open-database.ts';
import { createWriter } from '../../src/db/writer.ts';
import { createTestApp, createTestDb, orderBody, tableCounts } from '../support/db.ts';
import { runtimeCommand, runToExit } from '../support/process.ts';

const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

function postOrder(app: { request: (path: string, init: RequestInit) => Response | Promise<Response> }, body: unknown = orderBody(), headers: Record<string, string> = {}) {
  return app.request('/orders', { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
}

async function count(client: Client, sql: string): Promise<number> {
  return Number((await client.execute(sql)).rows[0]![0]);
}

describe('concurrency - one process', () => {
  it('200 concurrent POST /orders all get 201 and leave 200 orders with 200 outbox rows', async () => {
    const t = await createTestApp();
    cleanups.push(t.close);
    const responses = await Promise.all(
      Array.from({ length: 200 }, (_, i) => postOrder(t.app, orderBody({ customerId: `cust-${i}` }))),
    );
    expect(responses.map((r) => r.status)).toEqual(Array(200).fill(201));
    const ids = await Promise.all(responses.map(async (r) => ((await r.json()) as { orderId: string }).orderId));
    expect(new Set(ids).size).toBe(200);
    expect(await tableCounts(t.client)).toEqual({ orders: 200, order_lines: 400, outbox: 200, idempotency_keys: 0 });
    // Every order has its own event, and every event belongs to an order.
    expect(await count(t.client, 'SELECT count(DISTINCT o.id) FROM orders o JOIN outbox x ON x.aggregate_id = o.id')).toBe(200);
  });
});

describe('concurrency - two processes on one database file', () => {
  it('two writer processes placing orders in parallel lose nothing: 2N orders, 2N events, unique seq', async () => {
    const t = await createTestDb();
    cleanups.push(t.close);
    const N = 150;
    const { cmd, args } = runtimeCommand('node', 'test/support/write-orders.ts');
    const [a, b] = await Promise.all(
      ['proc-a', 'proc-b'].map((tag) => runToExit(cmd, [...args, t.url, String(N), tag, '4'], {}, 50_000)),
    );
    for (const r of [a!, b!]) {
      expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout).placed).toBe(N);
    }
    expect(await tableCounts(t.client)).toEqual({ orders: 2 * N, order_lines: 2 * N, outbox: 2 * N, idempotency_keys: 0 });
    expect(await count(t.client, 'SELECT count(DISTINCT seq) FROM outbox')).toBe(2 * N);
    expect(await count(t.client, 'SELECT count(DISTINCT id) FROM outbox')).toBe(2 * N);
    const perTag = await t.client.execute('SELECT customer_id, count(*) FROM orders GROUP BY customer_id ORDER BY customer_id');
    expect(perTag.rows.map((r) => [r[0], Number(r[1])])).toEqual([
      ['proc-a', N],
      ['proc-b', N],
    ]);
    const reported = new Set([...JSON.parse(a!.stdout).ids, ...JSON.parse(b!.stdout).ids]);
    const stored = (await t.client.execute('SELECT aggregate_id FROM outbox')).rows.map((r) => String(r[0]));
    expect(new Set(stored)).toEqual(reported);
  });
});

describe('concurrency - a database locked by another writer', () => {
  it('answers 503 problem+json with Retry-After while locked past the busy timeout, then 201 once released', async () => {
    const t = await createTestDb();
    cleanups.push(t.close);
    // The app gets its own client with a short busy timeout; t.client plays the other writer.
    const appClient = createClient({ url: t.url, timeout: 200 });
    cleanups.push(() => appClient.close());
    const db = createDatabase(appClient);
    const app = createApp({ ...t.deps, db, writer: createWriter(db) });

    const placed = await postOrder(app);
    expect(placed.status).toBe(201);
    const placedId = ((await placed.json()) as { orderId: string }).orderId;
    const before = await tableCounts(t.client);

    const lock = await t.client.transaction('write');
    try {
      const responses = await Promise.all([postOrder(app, orderBody(), { 'idempotency-key': 'k-1' }), postOrder(app)]);
      for (const res of responses) {
        expect(res.status).toBe(503);
        expect(res.headers.get('content-type')).toBe('application/problem+json');
        expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
        expect(await res.json()).toMatchObject({ status: 503, type: expect.any(String), title: expect.any(String), detail: expect.any(String) });
      }
      // Readers are not blocked by the writer (WAL).
      expect((await app.request(`/orders/${placedId}`)).status).toBe(200);
    } finally {
      await lock.rollback();
      lock.close();
    }

    expect(await tableCounts(t.client)).toEqual(before);
    // The busy attempt remembered nothing: the same key now places the order for real.
    const after = await postOrder(app, orderBody(), { 'idempotency-key': 'k-1' });
    expect(after.status).toBe(201);
    expect(after.headers.get('idempotent-replayed')).toBeNull();
    expect((await tableCounts(t.client)).orders).toBe(before.orders! + 1);
    expect(await count(t.client, `SELECT count(*) FROM outbox WHERE aggregate_id = '${((await after.json()) as { orderId: string }).orderId}'`)).toBe(1);

    // And the app's connection does not keep the write lock: another writer gets it at once.
    const probe = createClient({ url: t.url, timeout: 200 });
    cleanups.push(() => probe.close());
    const tx = await probe.transaction('write');
    await tx.rollback();
    tx.close();
  });
});
