import { createClient } from '@libsql/client';
import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { createApp } from '../../src/app.ts';
import { createDatabase } from '../../src/db/open-database.ts';
import { createWriter } from '../../src/db/writer.ts';
import { countRows, createTestApp, createTestDb, tableCounts } from '../support/db.ts';
import { fixtureModules } from '../support/fixture/modules.ts';
import { postJson } from '../support/http.ts';
import { runtimeCommand, runToExit } from '../support/process.ts';

const Opened = z.object({ accountId: z.string() });
const WriterReport = z.object({ opened: z.number(), ids: z.array(z.string()) });

describe('concurrency - one process', () => {
  it('200 concurrent commands all get 201 and leave 200 aggregates with 200 outbox rows', async () => {
    await using t = await createTestApp();
    const responses = await Promise.all(Array.from({ length: 200 }, (_, i) => postJson(t.app, '/accounts', { owner: `owner-${i}` })));
    expect(responses.map((r) => r.status)).toEqual(Array(200).fill(201));
    const ids = await Promise.all(responses.map(async (r) => Opened.parse(await r.json()).accountId));
    expect(new Set(ids).size).toBe(200);
    expect(await tableCounts(t.client)).toEqual({ accounts: 200, outbox: 200, idempotency_keys: 0 });
    // Every account has its own event, and every event belongs to an account.
    expect(await countRows(t.client, 'accounts a JOIN outbox x ON x.aggregate_id = a.id')).toBe(200);
  });
});

describe('concurrency - two processes on one database file', () => {
  it('two writer processes committing in parallel lose nothing: 2N aggregates, 2N events, unique seq', async () => {
    await using t = await createTestDb();
    const N = 150;
    const { cmd, args } = runtimeCommand('node', 'test/support/write-accounts.ts');
    const [a, b] = await Promise.all(['proc-a', 'proc-b'].map((owner) => runToExit(cmd, [...args, t.url, String(N), owner, '4'], {}, 50_000)));
    const reports = [a!, b!].map((r) => {
      expect(r.code, r.stderr).toBe(0);
      return WriterReport.parse(JSON.parse(r.stdout));
    });
    for (const r of reports) expect(r.opened).toBe(N);
    expect(await tableCounts(t.client)).toEqual({ accounts: 2 * N, outbox: 2 * N, idempotency_keys: 0 });
    expect(await countRows(t.client, '(SELECT DISTINCT seq FROM outbox)')).toBe(2 * N);
    expect(await countRows(t.client, '(SELECT DISTINCT id FROM outbox)')).toBe(2 * N);
    const perOwner = await t.client.execute('SELECT owner, count(*) FROM accounts GROUP BY owner ORDER BY owner');
    expect(perOwner.rows.map((r) => [r[0], Number(r[1])])).toEqual([
      ['proc-a', N],
      ['proc-b', N],
    ]);
    const stored = (await t.client.execute('SELECT aggregate_id FROM outbox')).rows.map((r) => String(r[0]));
    expect(new Set(stored)).toEqual(new Set(reports.flatMap((r) => r.ids)));
  });
});

describe('concurrency - a database locked by another writer', () => {
  it('answers 503 problem+json with Retry-After while locked past the busy timeout, then 201 once released', async () => {
    await using t = await createTestDb();
    // The app gets its own client with a short busy timeout; t.client plays the other writer.
    const appClient = createClient({ url: t.url, timeout: 200 });
    const probe = createClient({ url: t.url, timeout: 200 });
    try {
      const db = createDatabase(appClient);
      const app = createApp({ ...t.deps, db, writer: createWriter(db) }, { contexts: fixtureModules.contexts });
      const open = (headers: Record<string, string> = {}) => postJson(app, '/accounts', { owner: 'ann' }, headers);

      const opened = await open();
      expect(opened.status).toBe(201);
      const openedId = Opened.parse(await opened.json()).accountId;
      const before = await tableCounts(t.client);

      const lock = await t.client.transaction('write');
      try {
        const responses = await Promise.all([open({ 'idempotency-key': 'k-1' }), open()]);
        for (const res of responses) {
          expect(res.status).toBe(503);
          expect(res.headers.get('content-type')).toBe('application/problem+json');
          expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
          expect(await res.json()).toMatchObject({ status: 503, type: expect.any(String), title: expect.any(String), detail: expect.any(String) });
        }
        // Readers are not blocked by the writer (WAL).
        expect((await app.request(`/accounts/${openedId}`)).status).toBe(200);
      } finally {
        await lock.rollback();
        lock.close();
      }

      expect(await tableCounts(t.client)).toEqual(before);
      // The busy attempt remembered nothing: the same key now runs the command for real.
      const after = await open({ 'idempotency-key': 'k-1' });
      expect(after.status).toBe(201);
      expect(after.headers.get('idempotent-replayed')).toBeNull();
      expect((await tableCounts(t.client)).accounts).toBe(before.accounts! + 1);
      expect(await countRows(t.client, 'outbox', 'aggregate_id = ?', [Opened.parse(await after.json()).accountId])).toBe(1);

      // And the app's connection does not keep the write lock: another writer gets it at once.
      const tx = await probe.transaction('write');
      await tx.rollback();
      tx.close();
    } finally {
      appClient.close();
      probe.close();
    }
  });
});
