import { describe, expect, it } from 'vitest';
import { orderBody, tableCounts, testAppPerTest, type TestApp } from '../support/db.ts';


const app = testAppPerTest();

async function post(a: TestApp, path: string, body: unknown, key?: string): Promise<Response> {
  return a.app.request(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { 'idempotency-key': key }) },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

async function snapshot(res: Response) {
  return {
    status: res.status,
    location: res.headers.get('location'),
    replayed: res.headers.get('idempotent-replayed'),
    body: (await res.json()) as Record<string, unknown>,
  };
}

describe('idempotency - POST /orders', () => {
  it('the same key and body returns the first response, marked Idempotent-Replayed, and creates nothing new', async () => {
    const a = await app();
    const first = await snapshot(await post(a, '/orders', orderBody(), 'key-1'));
    expect(first.status).toBe(201);
    expect(first.replayed).toBeNull();
    expect(first.location).toBe(`/orders/${first.body.orderId}`);
    const after = await tableCounts(a.client);
    expect(after).toEqual({ orders: 1, order_lines: 2, outbox: 1, idempotency_keys: 1 });

    const second = await snapshot(await post(a, '/orders', orderBody(), 'key-1'));
    expect(second).toEqual({ ...first, replayed: 'true' });
    expect(await tableCounts(a.client)).toEqual(after);
  });

  it('the same body with the keys in another order and other whitespace is the same request', async () => {
    const a = await app();
    const first = await snapshot(await post(a, '/orders', orderBody(), 'key-1'));
    const b = orderBody();
    const reordered = `{ "items": ${JSON.stringify(b.items.map((i) => ({ unitPriceCents: i.unitPriceCents, sku: i.sku, quantity: i.quantity })), null, 2)},
      "currency": "EUR", "customerId": "cust-1" }`;
    const second = await snapshot(await post(a, '/orders', reordered, 'key-1'));
    expect(second).toEqual({ ...first, replayed: 'true' });
    expect((await tableCounts(a.client)).orders).toBe(1);
  });

  it('without a key the same body places a second order', async () => {
    const a = await app();
    expect((await post(a, '/orders', orderBody())).status).toBe(201);
    expect((await post(a, '/orders', orderBody())).status).toBe(201);
    expect(await tableCounts(a.client)).toEqual({ orders: 2, order_lines: 4, outbox: 2, idempotency_keys: 0 });
  });

  it('different keys with the same body place separate orders', async () => {
    const a = await app();
    const one = await snapshot(await post(a, '/orders', orderBody(), 'key-1'));
    const two = await snapshot(await post(a, '/orders', orderBody(), 'key-2'));
    expect(one.body.orderId).not.toBe(two.body.orderId);
    expect((await tableCounts(a.client)).orders).toBe(2);
  });

  it('the same key with another body → 422 problem and nothing new stored', async () => {
    const a = await app();
    expect((await post(a, '/orders', orderBody(), 'key-1')).status).toBe(201);
    const before = await tableCounts(a.client);
    const res = await post(a, '/orders', orderBody({ customerId: 'someone-else' }), 'key-1');
    expect(res.status).toBe(422);
    expect(res.headers.get('content-type')).toBe('application/problem+json');
    expect(await res.json()).toMatchObject({ status: 422, type: expect.any(String), title: expect.any(String), detail: expect.any(String) });
    expect(await tableCounts(a.client)).toEqual(before);
  });

  it('ten concurrent requests with one key create exactly one order and all answer its response', async () => {
    const a = await app();
    const responses = await Promise.all(Array.from({ length: 10 }, () => post(a, '/orders', orderBody(), 'same-key').then(snapshot)));
    expect(responses.map((r) => r.status)).toEqual(Array(10).fill(201));
    expect(new Set(responses.map((r) => r.body.orderId)).size).toBe(1);
    expect(responses.filter((r) => r.replayed === 'true')).toHaveLength(9);
    expect(await tableCounts(a.client)).toEqual({ orders: 1, order_lines: 2, outbox: 1, idempotency_keys: 1 });
  });

  it('a key that failed validation is not remembered: the corrected request with it succeeds', async () => {
    const a = await app();
    expect((await post(a, '/orders', orderBody({ currency: 'eur' }), 'key-1')).status).toBe(400);
    expect((await post(a, '/orders', orderBody(), 'key-1')).status).toBe(201);
    expect((await tableCounts(a.client)).orders).toBe(1);
  });

  it.each([
    ['300 characters', 'k'.repeat(300)],
    ['an empty value', ''],
    ['a space inside', 'my key'],
  ])('a key of %s → 400 problem and nothing stored', async (_label, key) => {
    const a = await app();
    const res = await post(a, '/orders', orderBody(), key);
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toBe('application/problem+json');
    expect(await res.json()).toMatchObject({ status: 400, detail: expect.stringMatching(/Idempotency-Key/) });
    expect(await tableCounts(a.client)).toEqual({ orders: 0, order_lines: 0, outbox: 0, idempotency_keys: 0 });
  });

  it('a key of 255 visible characters is accepted', async () => {
    const a = await app();
    expect((await post(a, '/orders', orderBody(), 'k'.repeat(255))).status).toBe(201);
  });
});

describe('idempotency - POST /orders/:id/cancel', () => {
  async function placed(a: TestApp): Promise<string> {
    const res = await post(a, '/orders', orderBody());
    return ((await res.json()) as { orderId: string }).orderId;
  }

  it('a repeated cancel with the same key replays 200 instead of answering 409, and emits one event', async () => {
    const a = await app();
    const id = await placed(a);
    const first = await snapshot(await post(a, `/orders/${id}/cancel`, { reason: 'oops' }, 'cancel-1'));
    expect(first).toMatchObject({ status: 200, replayed: null, body: { orderId: id, status: 'cancelled' } });
    const second = await snapshot(await post(a, `/orders/${id}/cancel`, { reason: 'oops' }, 'cancel-1'));
    expect(second).toEqual({ ...first, replayed: 'true' });
    const events = await a.client.execute(`SELECT message_type FROM outbox ORDER BY seq`);
    expect(events.rows.map((r) => r[0])).toEqual(['order.placed.v1', 'order.cancelled.v1']);
  });

  it('a cancel with a new key after a cancel is still a 409', async () => {
    const a = await app();
    const id = await placed(a);
    expect((await post(a, `/orders/${id}/cancel`, {}, 'cancel-1')).status).toBe(200);
    expect((await post(a, `/orders/${id}/cancel`, {}, 'cancel-2')).status).toBe(409);
  });

  it('a failed cancel (unknown order) stores no key, so it is answered 404 again', async () => {
    const a = await app();
    expect((await post(a, '/orders/missing/cancel', {}, 'cancel-1')).status).toBe(404);
    expect((await post(a, '/orders/missing/cancel', {}, 'cancel-1')).status).toBe(404);
    expect((await tableCounts(a.client)).idempotency_keys).toBe(0);
  });

  it('a key used to place an order, reused on a cancel, is a 422 and cancels nothing', async () => {
    const a = await app();
    const res = await post(a, '/orders', orderBody(), 'shared');
    const id = ((await res.json()) as { orderId: string }).orderId;
    const cancel = await post(a, `/orders/${id}/cancel`, {}, 'shared');
    expect(cancel.status).toBe(422);
    expect(await (await a.app.request(`/orders/${id}`)).json()).toMatchObject({ status: 'placed' });
  });
});
