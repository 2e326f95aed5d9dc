// Parity on Bun and Deno: the service started with each runtime's production command publishes a committed order
// to JetStream (ROLES=api,relay) and applies it through the subscribers' inboxes (ROLES=api,relay,consumers).
import { createClient } from '@libsql/client';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createTempDir } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { orderBody } from '../support/example-orders.ts';
import { postJson } from '../support/http.ts';
import { natsClient, startNats } from '../support/nats.ts';
import { freePort, overHttp, ROOT, runtimeCommand, waitForHttp, withOutput } from '../support/process.ts';
import { spawnGroup } from '../support/process-group.ts';
import { readStream } from '../support/stream.ts';
import { partitionOf } from '../../src/outbox/partition.ts';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

/** What a user types to run the service in production on each runtime (Bun and Deno run the TypeScript directly). */
const START: Record<'bun' | 'deno', { label: string; cmd: string; args: string[] }> = {
  bun: { label: 'bun src/entry/bun.ts', ...runtimeCommand('bun', 'src/entry/bun.ts') },
  deno: { label: 'deno task start', cmd: join(ROOT, 'node_modules/deno/deno'), args: ['task', 'start'] },
};

/** A private nats-server and database, and the service started on `runtime` with `roles`, answering /health. */
async function startOn(runtime: 'bun' | 'deno', roles: string) {
  const nats = await startNats();
  cleanups.push(() => nats[Symbol.asyncDispose]());
  const tmp = createTempDir();
  cleanups.push(() => tmp[Symbol.dispose]());
  const dbUrl = `file:${join(tmp.dir, 'app.db')}`;
  const port = await freePort();
  const service = spawnGroup(START[runtime].cmd, START[runtime].args, {
    HOST: '127.0.0.1',
    PORT: String(port),
    ROLES: roles,
    DATABASE_URL: dbUrl,
    CONSUMER_DATABASE_URL_TEMPLATE: `file:${join(tmp.dir, '{name}.db')}`,
    NATS_URL: nats.url,
    LOG_LEVEL: 'warn',
  });
  // `deno task` runs the service as its child: a group of its own, so a cleanup SIGKILL leaves nothing running
  cleanups.push(async () => void (await service.kill9()));
  const url = `http://127.0.0.1:${port}`;
  const health = await waitForHttp(`${url}/health`, { child: service, timeoutMs: 30_000 });
  expect(health.status, service.output()).toBe(200);
  return { nats, dbUrl, service, url };
}

describe.each(['bun', 'deno'] as const)('runtime parity %s - relay and subscribers in one process', (runtime) => {
  it(`${START[runtime].label} with ROLES=api,relay publishes a placed order with Nats-Msg-Id = its outbox id and marks the row sent`, async () => {
    const { nats, dbUrl, service, url } = await startOn(runtime, 'api,relay');

    const placed = await postJson(overHttp(url), '/orders', orderBody({ customerId: `parity-${runtime}` }));
    expect(placed.status, service.output()).toBe(201);
    const { orderId } = (await placed.json()) as { orderId: string };

    const client = createClient({ url: dbUrl, timeout: 5000 });
    cleanups.push(() => client.close());
    const row = async () => (await client.execute({ sql: 'SELECT id, status FROM outbox WHERE aggregate_id = ?', args: [orderId] })).rows[0];
    await withOutput(
      service,
      eventually(async () => (await row())?.status === 'sent', { timeoutMs: 20_000, what: 'the row sent' }),
    );
    const eventId = String((await row())!.id);

    const nc = await natsClient(nats.url);
    cleanups.push(() => nc.close());
    const messages = await readStream(nc, 'HONO_OUTBOX');
    expect(messages).toHaveLength(1);
    expect(messages[0]!.subject).toBe(`hono-outbox.order.${orderId}.${partitionOf('order', orderId, 16)}`);
    expect(messages[0]!.headers).toMatchObject({ 'Nats-Msg-Id': eventId, 'Event-Type': 'order.placed.v1' });
    expect(messages[0]!.event).toMatchObject({ eventId, type: 'order.placed.v1', aggregateId: orderId });

    const exit = await service.stop('SIGTERM');
    expect(exit, service.output()).toEqual({ code: 0, signal: null });
  });

  it(`${START[runtime].label} with ROLES=api,relay,consumers applies a placed and a cancelled order to the reporting read model`, async () => {
    const { service, url } = await startOn(runtime, 'api,relay,consumers');
    const customerId = `parity-${runtime}-read-model`;

    const api = overHttp(url);
    const kept = await postJson(api, '/orders', orderBody({ customerId }));
    expect(kept.status, service.output()).toBe(201);
    const cancelledOrder = await postJson(api, '/orders', orderBody({ customerId, items: [{ sku: 'x', quantity: 1, unitPriceCents: 700 }] }));
    expect(cancelledOrder.status).toBe(201);
    const { orderId } = (await cancelledOrder.json()) as { orderId: string };
    const cancel = await postJson(api, `/orders/${orderId}/cancel`, { reason: 'parity' });
    expect(cancel.status).toBe(200);
    await cancel.body?.cancel();

    const expected = { customerId, ordersPlaced: 2, ordersCancelled: 1, totalCents: 2 * 1250 + 499 };
    const report = async () => (await (await fetch(`${url}/reports/customers/${customerId}`)).json()) as Record<string, unknown>;
    await withOutput(
      service,
      eventually(async () => JSON.stringify(await report()) === JSON.stringify(expected), { timeoutMs: 20_000, what: 'the report' }),
    );
    expect(await report()).toEqual(expected);

    const exit = await service.stop('SIGTERM');
    expect(exit, service.output()).toEqual({ code: 0, signal: null });
  });
});
