// A command that waits out a long DATABASE_BUSY_TIMEOUT_MS behind another process's write lock, on each runtime's
// production entry: the client gets the 503 problem+json the API promises once the budget runs out, on every runtime.
import { createClient } from '@libsql/client';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createTempDir } from '../support/db.ts';
import { orderBody } from '../support/example-orders.ts';
import { spawnService, waitForHttp, type ServiceHandle } from '../support/process.ts';
import { startWriteLockHolder } from '../support/write-lock.ts';

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

describe.each(['bun', 'deno'] as const)('runtime %s - a command held longer than 10 s by a locked database', (runtime) => {
  it('answers 503 problem+json with Retry-After once DATABASE_BUSY_TIMEOUT_MS (12 s) runs out, and stores nothing', async () => {
    const tmp = createTempDir();
    cleanups.push(() => tmp[Symbol.dispose]());
    const url = `file:${join(tmp.dir, 'app.db')}`;
    const service: ServiceHandle = await spawnService(runtime, `src/entry/${runtime}.ts`, {
      DATABASE_URL: url,
      ROLES: 'api',
      LOG_LEVEL: 'warn',
      DATABASE_BUSY_TIMEOUT_MS: '12000',
    });
    cleanups.push(() => service.kill9());
    await waitForHttp(`${service.url}/health`, { child: service, timeoutMs: 30_000 });
    const holder = await startWriteLockHolder(url);
    cleanups.push(() => holder[Symbol.asyncDispose]());
    await holder.lock();

    const started = Date.now();
    const res = await fetch(`${service.url}/orders`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(orderBody()),
      signal: AbortSignal.timeout(40_000),
    }).catch((error: unknown) => error as Error);
    const waited = Date.now() - started;
    expect(res instanceof Response ? res.status : `no answer after ${waited} ms: ${String((res as Error).cause ?? res)}`, service.output()).toBe(503);
    const answer = res as Response;
    expect(answer.headers.get('content-type')).toBe('application/problem+json');
    expect(answer.headers.get('retry-after')).toBe('1');
    expect(await answer.json()).toMatchObject({ status: 503 });
    expect(waited).toBeGreaterThanOrEqual(11_000);

    await holder.release();
    const client = createClient({ url });
    cleanups.push(() => client.close());
    expect(Number((await client.execute('SELECT count(*) AS n FROM outbox')).rows[0]!.n)).toBe(0);
    expect(await service.stop('SIGTERM'), service.output()).toEqual({ code: 0, signal: null });
  }, 90_000);
});
