import { describe, expect, it } from 'vitest';
import { createTestApp, orderBody, tableCounts, testAppPerTest, type TestApp } from '../support/db.ts';

type Problem = { type: string; title: string; status: number; detail: string; issues?: Array<{ path: string; message: string; code: string }> };

const JSON_HEADERS = { 'content-type': 'application/json' };
const item = (over: Record<string, unknown> = {}) => ({ sku: 'sku-1', quantity: 1, unitPriceCents: 100, ...over });

const app = testAppPerTest();

async function post(a: TestApp, path: string, body: unknown, headers: Record<string, string> = JSON_HEADERS): Promise<Response> {
  return a.app.request(path, { method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body) });
}

async function placeOne(a: TestApp): Promise<string> {
  const res = await post(a, '/orders', orderBody());
  expect(res.status).toBe(201);
  return ((await res.json()) as { orderId: string }).orderId;
}

/** Asserts an RFC 9457 problem with `status`; returns the parsed body. */
async function expectProblem(res: Response, status: number): Promise<Problem> {
  expect(res.status).toBe(status);
  expect(res.headers.get('content-type')).toBe('application/problem+json');
  const body = (await res.json()) as Problem;
  expect(body).toMatchObject({ status, type: expect.any(String), title: expect.any(String), detail: expect.any(String) });
  expect(body.type.length).toBeGreaterThan(0);
  expect(body.title.length).toBeGreaterThan(0);
  return body;
}

/** Asserts a 400 validation problem listing an issue at each of `paths` (dot-joined, '' = the body itself). */
async function expectIssues(res: Response, paths: string[]): Promise<Problem> {
  const body = await expectProblem(res, 400);
  expect(Array.isArray(body.issues)).toBe(true);
  for (const issue of body.issues!) expect(issue).toMatchObject({ path: expect.any(String), message: expect.any(String), code: expect.any(String) });
  expect(body.issues!.map((i) => i.path)).toEqual(expect.arrayContaining(paths));
  return body;
}

/** Runs `send` and asserts that no command-side table changed. */
async function unchanged(a: TestApp, send: () => Promise<void>): Promise<void> {
  const before = await tableCounts(a.client);
  await send();
  expect(await tableCounts(a.client)).toEqual(before);
}

const without = (key: string) => {
  const b: Record<string, unknown> = orderBody();
  delete b[key];
  return b;
};

describe('http - POST /orders rejects invalid bodies with a 400 problem listing the issues', () => {
  const cases: Array<[string, unknown, string[]]> = [
    ['missing customerId', without('customerId'), ['customerId']],
    ['missing currency', without('currency'), ['currency']],
    ['missing items', without('items'), ['items']],
    ['an empty object', {}, ['customerId', 'currency', 'items']],
    ['a numeric customerId', orderBody({ customerId: 123 }), ['customerId']],
    ['a string for items', orderBody({ items: 'sku-1' }), ['items']],
    ['a string quantity', orderBody({ items: [item({ quantity: '2' })] }), ['items.0.quantity']],
    ['a null line', orderBody({ items: [null] }), ['items.0']],
    ['an unknown top-level field', orderBody({ discount: 10 }), ['']],
    ['an unknown line field', orderBody({ items: [item({ note: 'x' })] }), ['items.0']],
    ['a negative quantity', orderBody({ items: [item({ quantity: -1 })] }), ['items.0.quantity']],
    ['a zero quantity', orderBody({ items: [item({ quantity: 0 })] }), ['items.0.quantity']],
    ['a quantity of 1001', orderBody({ items: [item({ quantity: 1001 })] }), ['items.0.quantity']],
    ['a non-integer quantity', orderBody({ items: [item({ quantity: 1.5 })] }), ['items.0.quantity']],
    ['zero items', orderBody({ items: [] }), ['items']],
    ['101 items', orderBody({ items: Array.from({ length: 101 }, (_, i) => item({ sku: `s${i}` })) }), ['items']],
    ['a negative unitPriceCents', orderBody({ items: [item({ unitPriceCents: -1 })] }), ['items.0.unitPriceCents']],
    ['unitPriceCents above 100,000,000', orderBody({ items: [item({ unitPriceCents: 100_000_001 })] }), ['items.0.unitPriceCents']],
    ['a fractional unitPriceCents', orderBody({ items: [item({ unitPriceCents: 0.5 })] }), ['items.0.unitPriceCents']],
    ['a bad line after a good one', orderBody({ items: [item(), item({ quantity: 0 })] }), ['items.1.quantity']],
    ['a lower-case currency', orderBody({ currency: 'eur' }), ['currency']],
    ['a four-letter currency', orderBody({ currency: 'EURO' }), ['currency']],
    ['a two-letter currency', orderBody({ currency: 'EU' }), ['currency']],
    ['an empty customerId', orderBody({ customerId: '' }), ['customerId']],
    ['a 65-character customerId', orderBody({ customerId: 'c'.repeat(65) }), ['customerId']],
    ['an empty sku', orderBody({ items: [item({ sku: '' })] }), ['items.0.sku']],
    ['a 65-character sku', orderBody({ items: [item({ sku: 's'.repeat(65) })] }), ['items.0.sku']],
    ['JSON null', null, ['']],
    ['a JSON array', [orderBody()], ['']],
    ['a JSON string', 'order', ['']],
    ['a JSON number', 42, ['']],
  ];

  it.each(cases)('%s → 400 and nothing stored', async (_label, body, paths) => {
    const a = await app();
    await unchanged(a, async () => {
      const raw = typeof body === 'string' ? JSON.stringify(body) : body;
      await expectIssues(await post(a, '/orders', raw as unknown), paths);
    });
  });

  it('an unknown field is named in the issue', async () => {
    const a = await app();
    const problem = await expectIssues(await post(a, '/orders', orderBody({ discount: 10 })), ['']);
    expect(problem.issues!.some((i) => i.code === 'unrecognized_keys' && i.message.includes('discount'))).toBe(true);
  });

  it('accepts every limit at its boundary (64-character ids, 100 items, quantity 1000, prices 0 and 100,000,000)', async () => {
    const a = await app();
    const items = Array.from({ length: 100 }, (_, i) =>
      item({ sku: `${i}`.padEnd(64, 's'), quantity: i === 0 ? 1 : 1000, unitPriceCents: i % 2 ? 100_000_000 : 0 }),
    );
    const res = await post(a, '/orders', orderBody({ customerId: 'c'.repeat(64), currency: 'XTS', items }));
    expect(res.status).toBe(201);
    const body = (await res.json()) as { totalCents: number };
    expect(body.totalCents).toBe(50 * 1000 * 100_000_000);
    expect(await tableCounts(a.client)).toMatchObject({ orders: 1, order_lines: 100, outbox: 1 });
  });
});

describe('http - POST /orders rejects bodies it cannot read', () => {
  it('malformed JSON → 400 and nothing stored', async () => {
    const a = await app();
    await unchanged(a, async () => {
      await expectProblem(await post(a, '/orders', '{"customerId": "c",'), 400);
    });
  });

  it.each([
    ['text/plain', { 'content-type': 'text/plain' }],
    ['form-urlencoded', { 'content-type': 'application/x-www-form-urlencoded' }],
    ['no content type', {} as Record<string, string>],
  ])('a %s body → 415 and nothing stored', async (_label, headers) => {
    const a = await app();
    await unchanged(a, async () => {
      await expectProblem(await post(a, '/orders', JSON.stringify(orderBody()), headers), 415);
    });
  });

  it('a JSON media type with parameters or a +json suffix is accepted', async () => {
    const a = await app();
    expect((await post(a, '/orders', orderBody(), { 'content-type': 'application/json; charset=utf-8' })).status).toBe(201);
    expect((await post(a, '/orders', orderBody(), { 'content-type': 'application/vnd.orders+json' })).status).toBe(201);
  });

  it('a body over 64 KiB with Content-Length → 413 and nothing stored', async () => {
    const a = await app();
    const body = JSON.stringify(orderBody({ customerId: 'x'.repeat(70_000) }));
    await unchanged(a, async () => {
      const res = await post(a, '/orders', body, { ...JSON_HEADERS, 'content-length': String(Buffer.byteLength(body)) });
      await expectProblem(res, 413);
    });
  });

  it('a body over 64 KiB streamed without Content-Length → 413 and nothing stored', async () => {
    const a = await app();
    const chunk = new TextEncoder().encode(JSON.stringify(orderBody({ customerId: 'x'.repeat(16 * 1024) })));
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < 5; i++) controller.enqueue(chunk);
        controller.close();
      },
    });
    await unchanged(a, async () => {
      const res = await a.app.request('/orders', { method: 'POST', headers: JSON_HEADERS, body: stream, duplex: 'half' } as RequestInit);
      await expectProblem(res, 413);
    });
  });

  it('the limit is 64 KiB exactly: 65,536 bytes are read (and validated), 65,537 are refused', async () => {
    const a = await app();
    const sized = (bytes: number) => {
      const base = JSON.stringify(orderBody({ customerId: '' }));
      return base.replace('"customerId":""', `"customerId":"${'x'.repeat(bytes - base.length)}"`);
    };
    expect(Buffer.byteLength(sized(65_536))).toBe(65_536);
    await unchanged(a, async () => {
      await expectIssues(await post(a, '/orders', sized(65_536)), ['customerId']);
      await expectProblem(await post(a, '/orders', sized(65_537)), 413);
    });
  });
});

describe('http - GET /orders/:id and POST /orders/:id/cancel', () => {
  it('GET of an unknown order id → 404', async () => {
    const a = await app();
    await placeOne(a);
    await unchanged(a, async () => {
      await expectProblem(await a.app.request('/orders/01a22aff-0000-7000-8000-000000000000'), 404);
    });
  });

  it('cancel of an unknown order id → 404 and nothing stored', async () => {
    const a = await app();
    await placeOne(a);
    await unchanged(a, async () => {
      await expectProblem(await post(a, '/orders/does-not-exist/cancel', {}), 404);
    });
  });

  it('cancel twice → 200 then 409, and the second stores nothing', async () => {
    const a = await app();
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
    const a = await app();
    const id = await placeOne(a);
    const res = await a.app.request(`/orders/${id}/cancel`, { method: 'POST' });
    expect(res.status).toBe(200);
    expect(await (await a.app.request(`/orders/${id}`)).json()).toMatchObject({ status: 'cancelled', cancelReason: null });
  });

  it('a reason of 501 characters → 400 with an issue at reason; 500 characters are accepted', async () => {
    const a = await app();
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
    const a = await app();
    const id = await placeOne(a);
    await unchanged(a, async () => {
      await expectIssues(await post(a, `/orders/${id}/cancel`, body), paths);
    });
    expect(await (await a.app.request(`/orders/${id}`)).json()).toMatchObject({ status: 'placed', version: 1 });
  });

  it('cancel with malformed JSON → 400 and with text/plain → 415; the order stays placed', async () => {
    const a = await app();
    const id = await placeOne(a);
    await unchanged(a, async () => {
      await expectProblem(await post(a, `/orders/${id}/cancel`, '{"reason":'), 400);
      await expectProblem(await post(a, `/orders/${id}/cancel`, 'because', { 'content-type': 'text/plain' }), 415);
    });
    expect(await (await a.app.request(`/orders/${id}`)).json()).toMatchObject({ status: 'placed' });
  });
});

describe('http - routing', () => {
  it.each([
    ['GET', '/nope'],
    ['POST', '/orders/a/b'],
    ['DELETE', '/orders'],
    ['PUT', '/orders/x'],
  ])('%s %s → 404 problem', async (method, path) => {
    const a = await app();
    await unchanged(a, async () => {
      const res = await a.app.request(path, { method, ...(method === 'GET' ? {} : { headers: JSON_HEADERS, body: '{}' }) });
      await expectProblem(res, 404);
    });
  });
});

/** mulberry32: a tiny seeded PRNG, so a failing fuzz case is reproducible from its index. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

function createFuzzer(seed: number) {
  const rnd = prng(seed);
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
    const body = orderBody() as Record<string, unknown> & { items: Array<Record<string, unknown>> };
    const target = rnd() < 0.5 ? body : body.items[int(body.items.length)]!;
    const key = pick(Object.keys(target).concat(pick(KEYS)));
    if (rnd() < 0.2) delete target[key];
    else target[key] = value(2);
    return body;
  };
  /** A random valid order: exercises the success path with odd but legal values. */
  const valid = (): unknown =>
    orderBody({
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

describe('http - fuzz', () => {
  it('no generated request yields a 5xx, and every stored order has exactly one placed event', async () => {
    const a = await app();
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

describe('http - optional bodies', () => {
  it('a cancel with Content-Type application/json and an empty body cancels like one without a body', async () => {
    const t = await createTestApp();
    try {
      const placed = await t.app.request('/orders', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(orderBody()) });
      const { orderId } = (await placed.json()) as { orderId: string };
      const res = await t.app.request(`/orders/${orderId}/cancel`, { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': '0' }, body: '' });
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ orderId, status: 'cancelled' });
    } finally {
      t.close();
    }
  });
});
