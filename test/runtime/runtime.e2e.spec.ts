import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createTempDir } from '../support/db.ts';
import { orderBody } from '../support/example-orders.ts';
import { RUNTIMES, spawnService, waitForHttp, type ServiceHandle } from '../support/process.ts';

const running: ServiceHandle[] = [];
const dirs: Array<{ [Symbol.dispose](): void }> = [];
afterEach(async () => {
  for (const s of running.splice(0)) await s.kill9();
  for (const d of dirs.splice(0)) d[Symbol.dispose]();
});

describe.each(RUNTIMES)('runtime %s - the service as a real process', (runtime) => {
  it('serves POST /orders and GET /orders/:id over HTTP, then exits 0 on SIGTERM', async () => {
    const tmp = createTempDir();
    dirs.push(tmp);
    const service = await spawnService(runtime, `src/entry/${runtime}.ts`, {
      DATABASE_URL: `file:${join(tmp.dir, 'app.db')}`,
      ROLES: 'api',
      LOG_LEVEL: 'warn',
    });
    running.push(service);
    const health = await waitForHttp(`${service.url}/health`, { child: service, timeoutMs: 20_000 });
    expect(health.status, service.output()).toBe(200);

    const post = await fetch(`${service.url}/orders`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(orderBody()),
    });
    expect(post.status, service.output()).toBe(201);
    const placed = (await post.json()) as { orderId: string; status: string; totalCents: number; currency: string; placedAt: string };
    expect(placed).toMatchObject({ status: 'placed', totalCents: 2 * 1250 + 499, currency: 'EUR' });
    expect(post.headers.get('location')).toBe(`/orders/${placed.orderId}`);

    const get = await fetch(`${service.url}/orders/${placed.orderId}`);
    expect(get.status).toBe(200);
    expect(await get.json()).toMatchObject({
      orderId: placed.orderId,
      customerId: orderBody().customerId,
      status: 'placed',
      currency: 'EUR',
      items: orderBody().items,
      totalCents: placed.totalCents,
      placedAt: placed.placedAt,
      version: 1,
    });

    const invalid = await fetch(`${service.url}/orders`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(invalid.status).toBe(400);
    expect(invalid.headers.get('content-type')).toBe('application/problem+json');
    await invalid.body?.cancel();

    const exit = await service.stop('SIGTERM');
    expect(exit, service.output()).toEqual({ code: 0, signal: null });
  });
});
