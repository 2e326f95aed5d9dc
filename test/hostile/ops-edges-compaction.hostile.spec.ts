// Compaction under hostile conditions: relays whose clocks disagree with the compacting process, a relay marking rows
// while compaction deletes, another process holding the write lock past the busy timeout. Real libSQL files, real
// nats-server, the real relay.
import { describe, expect, it } from 'vitest';
import { compactOutbox } from '../../src/outbox/compact-outbox.ts';
import { countRows } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { postJson } from '../support/http.ts';
import { createTestService } from '../support/service.ts';
import { freshStream, readStream, streamEnv } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';
import { startWriteLockHolder } from '../support/write-lock.ts';

const nats = useNats();
const DAY = 86_400_000;

const openAccounts = async (app: { request: (p: string, i?: RequestInit) => Response | Promise<Response> }, n: number) => {
  for (let i = 0; i < n; i++) expect((await postJson(app, '/accounts', { owner: `o-${i}` })).status).toBe(201);
};

describe('outbox compaction - relays whose clocks disagree', () => {
  it('rows a fast-clock relay stamped as sent in the future do not stop compaction from deleting the old sent rows behind them', async () => {
    let skewMs = 365 * DAY; // the first relay's clock runs a year ahead
    const stream = await freshStream(nats().nc, 'SKEW');
    await using s = await createTestService({ ROLES: 'api,relay', NATS_URL: nats().url, ...streamEnv(stream) }, { clock: () => new Date(Date.now() + skewMs) });
    await openAccounts(s.app, 4);
    await eventually(async () => (await countRows(s.client, 'outbox', "status = 'sent'")) === 4, { what: 'the first 4 rows sent', timeoutMs: 10_000 });
    skewMs = 0; // the clock is fixed (or another relay with a right clock takes over)
    await openAccounts(s.app, 12);
    await eventually(async () => (await countRows(s.client, 'outbox', "status = 'sent'")) === 16, { what: 'all 16 rows sent', timeoutMs: 10_000 });

    // eight days later, with a 7-day retention: the 12 rows sent at the right time are old, the 4 "future" rows are not
    const cutoffMs = Date.now() + 8 * DAY - 7 * DAY;
    const first = await compactOutbox(s.deps, { cutoffMs, batch: 4 });
    const second = await compactOutbox(s.deps, { cutoffMs, batch: 4 });
    expect(first.deleted + second.deleted).toBe(12);
    expect(await countRows(s.client, 'outbox')).toBe(4);
  });
});

describe('outbox compaction - racing the relay', () => {
  it('compaction deleting every sent row while the relay drains a backlog never removes an unpublished row: every event reaches the stream once', async () => {
    const stream = await freshStream(nats().nc, 'RACE');
    await using s = await createTestService({ ROLES: 'api,relay', NATS_URL: nats().url, ...streamEnv(stream), RELAY_BATCH: '7' });
    const total = 300;
    await s.client.execute(
      `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, attempts, occurred_at, available_at) VALUES ('failed-1', 'account', 'x1', 'account.gone.v1', '{}', 'failed', 5, 0, 0)`,
    );
    let posting = true;
    let deleted = 0;
    let racedWithPending = 0;
    // compaction with a cutoff in the future (every sent row is "old"), as fast as it can, while commands and the relay run
    const compacting = (async () => {
      const until = Date.now() + 15_000;
      while ((posting || (await countRows(s.client, 'outbox', "status = 'pending'")) > 0) && Date.now() < until) {
        const pending = await countRows(s.client, 'outbox', "status = 'pending'");
        const n = (await compactOutbox(s.deps, { cutoffMs: Date.now() + DAY, batch: 3 })).deleted;
        if (pending > 0 && n > 0) racedWithPending++;
        deleted += n;
      }
    })();
    for (let i = 0; i < total; i += 10) {
      await Promise.all(Array.from({ length: 10 }, (_, k) => postJson(s.app, '/accounts', { owner: `r-${i + k}` })));
      if (i === 150)
        await s.client.execute(
          `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, attempts, occurred_at, available_at) VALUES ('failed-2', 'account', 'x2', 'account.gone.v1', '{}', 'failed', 5, 0, 0)`,
        );
    }
    posting = false;
    await compacting;
    deleted += (await compactOutbox(s.deps, { cutoffMs: Date.now() + DAY })).deleted;
    expect(racedWithPending).toBeGreaterThan(0);
    expect(await countRows(s.client, 'outbox', "status = 'pending'")).toBe(0);
    expect(deleted).toBe(total);
    expect((await s.client.execute('SELECT id FROM outbox ORDER BY id')).rows.map((r) => r.id)).toEqual(['failed-1', 'failed-2']);
    const published = await readStream(nats().nc, stream);
    expect(published).toHaveLength(total);
    expect(new Set(published.map((m) => m.event.eventId)).size).toBe(total);
  });
});

describe('outbox compaction - another process holds the write lock', () => {
  it("a compaction meeting another process's write lock past the busy timeout fails within the budget having deleted nothing, and the API and the next compaction work once the lock is gone", async () => {
    const stream = await freshStream(nats().nc, 'LOCK');
    await using s = await createTestService({ ROLES: 'api', NATS_URL: nats().url, ...streamEnv(stream), DATABASE_BUSY_TIMEOUT_MS: '300' });
    // the test client's driver waits 5 s by default; 300 ms stands for DATABASE_BUSY_TIMEOUT_MS
    await s.client.execute('PRAGMA busy_timeout = 300');
    const values = Array.from({ length: 50 }, (_, i) => `('s${i}', 'account', 'a${i}', 'account.opened.v1', '{}', 'sent', 0, 0, 1000)`).join(', ');
    await s.client.execute(
      `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, occurred_at, available_at, sent_at) VALUES ${values}`,
    );
    await using holder = await startWriteLockHolder(s.url);
    await holder.lock();
    const started = Date.now();
    await expect(compactOutbox(s.deps, { cutoffMs: Date.now(), batch: 10 })).rejects.toThrow();
    expect(Date.now() - started).toBeLessThan(3000);
    expect(await countRows(s.client, 'outbox')).toBe(50);
    await holder.release();
    expect((await postJson(s.app, '/accounts', { owner: 'after' })).status).toBe(201);
    expect((await compactOutbox(s.deps, { cutoffMs: Date.now(), batch: 10 })).deleted).toBe(50);
    expect(await countRows(s.client, 'outbox', "status = 'pending'")).toBe(1);
  });
});
