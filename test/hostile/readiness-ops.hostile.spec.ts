// /ready and /metrics under a paused broker, a held write lock and a broken database file,
// over real libSQL files and a private nats-server (paused with SIGSTOP).
import { createClient } from '@libsql/client';
import { describe, expect, it } from 'vitest';
import { createSubscriberDb } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import { postJson, type RequestHandler } from '../support/http.ts';
import { startNats } from '../support/nats.ts';
import { createTestService } from '../support/service.ts';
import { freshStream, streamEnv } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';
import { startWriteLockHolder } from '../support/write-lock.ts';

const nats = useNats();

/** `app.request(path)`'s status and how long it took, or 'hung' after `ms`. */
async function timed(app: RequestHandler, path: string, ms = 5000): Promise<{ status: number | 'hung'; ms: number; body: string }> {
  const started = Date.now();
  const res = await Promise.race([Promise.resolve(app.request(path)), new Promise<'hung'>((r) => setTimeout(() => r('hung'), ms))]);
  if (res === 'hung') return { status: 'hung', ms: Date.now() - started, body: '' };
  const body = await res.text();
  return { status: res.status, ms: Date.now() - started, body };
}

describe('readiness - a paused broker (SIGSTOP)', () => {
  it('/ready and /metrics answer within 3 s while the broker is frozen, and /ready is not 503', async () => {
    await using own = await startNats();
    const stream = await freshStream(nats().nc, 'PAUSE');
    await using sdb = await createSubscriberDb({ subscriber: 'audit' });
    await using s = await createTestService(
      { ROLES: 'api,relay,consumers', CONSUMERS: 'audit', NATS_URL: own.url, ...streamEnv(stream) },
      { openSubscriberDb: async () => createClient({ url: sdb.url, timeout: 5000 }) },
    );
    await eventually(async () => (JSON.parse((await timed(s.app, '/ready')).body) as { status: string }).status === 'ready', { what: 'ready' });
    expect((await postJson(s.app, '/accounts', { owner: 'ann' })).status).toBe(201);
    await own.pause();
    try {
      // the status reader's cache expires (3 s) so the next reads really ask the frozen broker
      await new Promise((r) => setTimeout(r, 3500));
      for (let i = 0; i < 3; i++) {
        const ready = await timed(s.app, '/ready');
        expect(ready.status, `/ready took ${ready.ms} ms`).not.toBe('hung');
        expect(ready.ms, '/ready took too long').toBeLessThan(3000);
        expect(ready.status).toBe(200);
        const metrics = await timed(s.app, '/metrics');
        expect(metrics.ms, '/metrics took too long').toBeLessThan(3000);
        expect(metrics.status).toBe(200);
        expect((await postJson(s.app, '/accounts', { owner: 'bob' })).status).toBe(201);
      }
    } finally {
      own.resume();
    }
  });
});

describe('readiness - the service database write-locked by another process', () => {
  it('/ready and /metrics answer promptly (reads are not blocked by BEGIN IMMEDIATE in WAL mode)', async () => {
    await using s = await createTestService({ ROLES: 'api' }, { connect: undefined });
    await using holder = await startWriteLockHolder(s.url);
    await holder.lock();
    const ready = await timed(s.app, '/ready');
    expect(ready.ms).toBeLessThan(2000);
    expect(ready.status).toBe(200);
    const metrics = await timed(s.app, '/metrics');
    expect(metrics.ms).toBeLessThan(2000);
    expect(metrics.body).toMatch(/^outbox_pending_messages \d+$/m);
    await holder.release();
  });
});
