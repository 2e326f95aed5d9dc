// The example context's HTTP contract: POST /orders and POST /orders/:id/cancel validation and limits, the order's
// read-back, and a fuzz of order bodies. (How the core reads bodies, 413/415 and routing: test/int/http-bodies.)
import { describe, expect, it } from 'vitest';
import type { TestApp } from '../support/db.ts';
import { orderBody } from '../support/example-orders.ts';
import { expectIssues, expectProblem, expectUnchanged, postJson } from '../support/http.ts';
import { createRandom } from '../support/random.ts';
import { createExampleApp, ORDER_TABLES, orderTableCounts } from './support.ts';

/** A valid order body with fields replaced by anything (the invalid cases send what the schema refuses). */
const bodyWith = (over: Record<string, unknown>): Record<string, unknown> => ({ ...orderBody(), ...over });
const item = (over: Record<string, unknown> = {}) => ({ sku: 'sku-1', quantity: 1, unitPriceCents: 100, ...over });
const app = createExampleApp;
const tableCounts = orderTableCounts;

function post(a: TestApp, path: string, body: unknown, headers?: Record<string, string>): Promise<Response> {
  return postJson(a.app, path, body, headers);
}

async function placeOne(a: TestApp): Promise<string> {
  const res = await post(a, '/orders', orderBody());
  expect(res.status).toBe(201);
  return ((await res.json()) as { orderId: string }).orderId;
}

/** Runs `send` and asserts that no table of the example's command side changed. */
const unchanged = (a: TestApp, send: () => Promise<void>) => expectUnchanged(a.client, send, ORDER_TABLES);

const without = (key: string) => Object.fromEntries(Object.entries(orderBody()).filter(([k]) => k !== key));

describe('example orders - POST /orders rejects invalid bodies with a 400 problem listing the issues', () => {
  const cases: Array<[string, unknown, string[]]> = [
    ['missing customerId', without('customerId'), ['customerId']],
    ['missing currency', without('currency'), ['currency']],
    ['missing items', without('items'), ['items']],
    ['an empty object', {}, ['customerId', 'currency', 'items']],
    ['a numeric customerId', bodyWith({ customerId: 123 }), ['customerId']],
    ['a string for items', bodyWith({ items: 'sku-1' }), ['items']],
    ['a string quantity', bodyWith({ items: [item({ quantity: '2' })] }), ['items.0.quantity']],
    ['a null line', bodyWith({ items: [null] }), ['items.0']],
    ['an unknown top-level field', bodyWith({ discount: 10 }), ['']],
    ['an unknown line field', bodyWith({ items: [item({ note: 'x' })] }), ['items.0']],
    ['a negative quantity', bodyWith({ items: [item({ quantity: -1 })] }), ['items.0.quantity']],
    ['a zero quantity', bodyWith({ items: [item({ quantity: 0 })] }), ['items.0.quantity']],
    ['a quantity of 1001', bodyWith({ items: [item({ quantity: 1001 })] }), ['items.0.quantity']],
    ['a non-integer quantity', bodyWith({ items: [item({ quantity: 1.5 })] }), ['items.0.quantity']],
    ['zero items', bodyWith({ items: [] }), ['items']],
    ['101 items', bodyWith({ items: Array.from({ length: 101 }, (_, i) => item({ sku: `s${i}` })) }), ['items']],
    ['a negative unitPriceCents', bodyWith({ items: [item({ unitPriceCents: -1 })] }), ['items.0.unitPriceCents']],
    ['unitPriceCents above 100,000,000', bodyWith({ items: [item({ unitPriceCents: 100_000_001 })] }), ['items.0.unitPriceCents']],
    ['a fractional unitPriceCents', bodyWith({ items: [item({ unitPriceCents: 0.5 })] }), ['items.0.unitPriceCents']],
    ['a bad line after a good one', bodyWith({ items: [item(), item({ quantity: 0 })] }), ['items.1.quantity']],
    ['a lower-case currency', bodyWith({ currency: 'eur' }), ['currency']],
    ['a four-letter currency', bodyWith({ currency: 'EURO' }), ['currency']],
    ['a two-letter currency', bodyWith({ currency: 'EU' }), ['currency']],
    ['an empty customerId', bodyWith({ customerId: '' }), ['customerId']],
    ['a 65-character customerId', bodyWith({ customerId: 'c'.repeat(65) }), ['customerId']],
    ['an empty sku', bodyWith({ items: [item({ sku: '' })] }), ['items.0.sku']],
    ['a 65-character sku', bodyWith({ items: [item({ sku: 's'.repeat(65) })] }), ['items.0.sku']],
    ['JSON null', null, ['']],
    ['a JSON array', [orderBody()], ['']],
    ['a JSON string', 'order', ['']],
    ['a JSON number', 42, ['']],
  ];

  it.each(cases)('%s → 400 and nothing stored', async (_label, body, paths) => {
    await using a = await app();
    await unchanged(a, async () => {
      const raw = typeof body === 'string' ? JSON.stringify(body) : body;
      await expectIssues(await post(a, '/orders', raw as unknown), paths);
    });
  });

  it('an unknown field is named in the issue', async () => {
    await using a = await app();
    const problem = await expectIssues(await post(a, '/orders', bodyWith({ discount: 10 })), ['']);
    expect(problem.issues!.some((i) => i.code === 'unrecognized_keys' && i.message.includes('discount'))).toBe(true);
  });

  it('accepts every limit at its boundary (64-character ids, 100 items, quantity 1000, prices 0 and 100,000,000)', async () => {
    await using a = await app();
    const items = Array.from({ length: 100 }, (_, i) =>
      item({ sku: `${i}`.padEnd(64, 's'), quantity: i === 0 ? 1 : 1000, unitPriceCents: i % 2 ? 100_000_000 : 0 }),
    );
    const res = await post(a, '/orders', bodyWith({ customerId: 'c'.repeat(64), currency: 'XTS', items }));
    expect(res.status).toBe(201);
    const body = (await res.json()) as { totalCents: number };
    expect(body.totalCents).toBe(50 * 1000 * 100_000_000);
    expect(await tableCounts(a.client)).toMatchObject({ orders: 1, order_lines: 100, outbox: 1 });
  });
});

describe('example orders - GET /orders/:id and POST /orders/:id/cancel', () => {
  it('GET of an unknown order id → 404', async () => {
    await using a = await app();
    await placeOne(a);
    await unchanged(a, async () => {
      await expectProblem(await a.app.request('/orders/01a22aff-0000-7000-8000-000000000000'), 404);
    });
  });

  it('cancel of an unknown order id → 404 and nothing stored', async () => {
    await using a = await app();
    await placeOne(a);
    await unchanged(a, async () => {
      await expectProblem(await post(a, '/orders/does-not-exist/cancel', {}), 404);
    });
  });

  it('cancel twice → 200 then 409, and the second stores nothing', async () => {
    await using a = await app();
    const id = await placeOne(a);
    const first = await post(a, `/orders/${id}/cancel`, { reason: 'duplicate order' });
    expect(first.status).toBe(200);
    expect(await first.json()).toEqual({ orderId: id, status: 'cancelled' });
    await unchanged(a, async () => {
      await expectProblem(await post(a, `/orders/${id}/cancel`, { reason: 'again' }), 409);
    });
    const get = (await (await a.app.request(`/orders/${id}`)).json()) as { status: string; cancelReason: string; version: number };
    expect(get).toMatchObject({ status: 'cancelled', cancelReason: 'duplicate order', version: 2 });
  });

  it('cancel with a body-less request (no content type) cancels without a reason', async () => {
    await using a = await app();
    const id = await placeOne(a);
    const res = await a.app.request(`/orders/${id}/cancel`, { method: 'POST' });
    expect(res.status).toBe(200);
    expect(await (await a.app.request(`/orders/${id}`)).json()).toMatchObject({ status: 'cancelled', cancelReason: null });
  });

  it('a reason of 501 characters → 400 with an issue at reason; 500 characters are accepted', async () => {
    await using a = await app();
    const id = await placeOne(a);
    await unchanged(a, async () => {
      await expectIssues(await post(a, `/orders/${id}/cancel`, { reason: 'r'.repeat(501) }), ['reason']);
    });
    expect((await post(a, `/orders/${id}/cancel`, { reason: 'r'.repeat(500) })).status).toBe(200);
  });

  it.each([
    ['a numeric reason', { reason: 5 }, ['reason']],
    ['an unknown field', { reason: 'x', refund: true }, ['']],
    ['JSON null', null, ['']],
    ['a JSON array', [], ['']],
  ])('cancel with %s → 400 and the order stays placed', async (_label, body, paths) => {
    await using a = await app();
    const id = await placeOne(a);
    await unchanged(a, async () => {
      await expectIssues(await post(a, `/orders/${id}/cancel`, body), paths);
    });
    expect(await (await a.app.request(`/orders/${id}`)).json()).toMatchObject({ status: 'placed', version: 1 });
  });

  it('cancel with malformed JSON → 400 and with text/plain → 415; the order stays placed', async () => {
    await using a = await app();
    const id = await placeOne(a);
    await unchanged(a, async () => {
      await expectProblem(await post(a, `/orders/${id}/cancel`, '{"reason":'), 400);
      await expectProblem(await post(a, `/orders/${id}/cancel`, 'because', { 'content-type': 'text/plain' }), 415);
    });
    expect(await (await a.app.request(`/orders/${id}`)).json()).toMatchObject({ status: 'placed' });
  });
});

function createFuzzer(seed: number) {
  const rnd = createRandom(seed).next;
  const int = (n: number) => Math.floor(rnd() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
  const KEYS = ['customerId', 'currency', 'items', 'sku', 'quantity', 'unitPriceCents', 'reason', '__proto__', 'constructor', 'toString', '', 'x'];
  const STRINGS = ['', 'EUR', 'eur', 'c', 'é', '\u0000', '\ud800', '😀'.repeat(40), 'a.b*>', ' ', '\n', 'null', '{}', "'; DROP TABLE orders; --"];
  const NUMBERS = [0, -0, 1, -1, 1000, 1001, 1.5, 1e-7, 1e308, -1e308, 100_000_000, 100_000_001, Number.MAX_SAFE_INTEGER, 2 ** 53 + 2];
  const value = (depth: number): unknown => {
    switch (int(depth > 3 ? 4 : 7)) {
      case 0:
        return null;
      case 1:
        return rnd() < 0.5;
      case 2:
        return rnd() < 0.5 ? pick(NUMBERS) : (rnd() - 0.5) * 10 ** int(12);
      case 3:
        return rnd() < 0.7 ? pick(STRINGS) : 'z'.repeat(int(600));
      case 4:
        return Array.from({ length: int(rnd() < 0.1 ? 120 : 4) }, () => value(depth + 1));
      default:
        return Object.fromEntries(Array.from({ length: int(5) }, () => [pick(KEYS), value(depth + 1)]));
    }
  };
  /** A valid order with one field replaced, dropped or added: close to valid is where handlers crack. */
  const mutated = (): unknown => {
    const order = orderBody();
    const body: Record<string, unknown> = { ...order };
    const items: Array<Record<string, unknown>> = order.items.map((i) => ({ ...i }));
    body.items = items;
    const target = rnd() < 0.5 ? body : items[int(items.length)]!;
    const key = pick(Object.keys(target).concat(pick(KEYS)));
    if (rnd() < 0.2) delete target[key];
    else target[key] = value(2);
    return body;
  };
  /** A random valid order: exercises the success path with odd but legal values. */
  const valid = (): unknown =>
    bodyWith({
      customerId: pick(['c', 'é😀', 'a.b*>', ' ', "'; DROP TABLE orders; --", 'x'.repeat(64)]),
      currency: pick(['EUR', 'USD', 'XTS']),
      items: Array.from({ length: 1 + int(rnd() < 0.1 ? 100 : 5) }, (_, i) => ({
        sku: `s${i}`,
        quantity: 1 + int(1000),
        unitPriceCents: pick([0, 1, 100_000_000, int(100_000_001)]),
      })),
    });
  const body = (): string => {
    const r = rnd();
    if (r < 0.2) return JSON.stringify(valid());
    if (r < 0.5) return JSON.stringify(mutated());
    if (r < 0.8) return JSON.stringify(value(0)) ?? 'null';
    const text = JSON.stringify(mutated());
    return r < 0.9 ? text.slice(0, int(text.length)) : `${text}${pick(['}', ']', ',', 'x', '\u0000'])}`;
  };
  const cancelBody = (): string => {
    const r = rnd();
    if (r < 0.3) return JSON.stringify(rnd() < 0.5 ? {} : { reason: pick(STRINGS) });
    if (r < 0.6) return JSON.stringify({ reason: value(1) });
    return body();
  };
  const headers = (): Record<string, string> => {
    const h: Record<string, string> = {};
    const type =
      rnd() < 0.85
        ? pick(['application/json', 'application/json; charset=utf-8', 'application/problem+json', 'APPLICATION/JSON'])
        : pick(['text/plain', 'application/jsonx', 'multipart/form-data; boundary=x', '']);
    if (type) h['content-type'] = type;
    if (rnd() < 0.2) h['idempotency-key'] = rnd() < 0.5 ? `k-${int(5)}` : String.fromCharCode(...Array.from({ length: int(300) }, () => 32 + int(95)));
    return h;
  };
  return { rnd, pick, body, cancelBody, headers };
}

describe('example orders - fuzz', () => {
  it('no generated request yields a 5xx, and every stored order has exactly one placed event', async () => {
    await using a = await app();
    const known = await placeOne(a);
    const f = createFuzzer(0x5eed);
    let created = 1;
    for (let i = 0; i < 300; i++) {
      const isCancel = f.rnd() < 0.25;
      const path = isCancel ? `/orders/${f.pick([known, known, 'missing', 'a%20b', '..'])}/cancel` : '/orders';
      const body = isCancel ? f.cancelBody() : f.body();
      const headers = f.headers();
      const res = await post(a, path, body, headers);
      const text = await res.text();
      const context = `case ${i}: POST ${path} ${JSON.stringify(headers)} ${body.slice(0, 300)} → ${res.status} ${text.slice(0, 300)}`;
      expect(res.status, context).toBeLessThan(500);
      if (res.status >= 400) expect(res.headers.get('content-type'), context).toBe('application/problem+json');
      if (res.status === 201 && res.headers.get('idempotent-replayed') !== 'true') created++;
    }
    const counts = await tableCounts(a.client);
    expect(counts.orders).toBe(created);
    const placedEvents = await a.client.execute(`SELECT count(*) FROM outbox WHERE message_type = 'order.placed.v1'`);
    expect(Number(placedEvents.rows[0]![0])).toBe(created);
  });
});
