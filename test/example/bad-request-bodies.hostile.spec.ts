// Bad bodies and headers against the example app in process: each bad request is a 4xx problem+json and stores
// nothing (a body that is no UTF-8 included, chunked or not); a valid request still works afterwards.
import { describe, expect, it } from 'vitest';
import { orderBody } from '../support/example-orders.ts';
import { createExampleApp, orderTableCounts } from './support.ts';

type Case = [string, string, RequestInit];
const J = { 'content-type': 'application/json' };
const valid = () => JSON.stringify(orderBody());
const enc = new TextEncoder();

function bytesWith(prefix: string, bad: number[], suffix: string): Uint8Array<ArrayBuffer> {
  const a = enc.encode(prefix),
    b = enc.encode(suffix);
  const out = new Uint8Array(new ArrayBuffer(a.length + bad.length + b.length));
  out.set(a, 0);
  out.set(bad, a.length);
  out.set(b, a.length + bad.length);
  return out;
}
const ob = orderBody() as Record<string, unknown>;
const rest = JSON.stringify({ currency: ob.currency, items: ob.items }).slice(1);

const cases: Case[] = [
  ['invalid UTF-8 (0xff) inside customerId', '/orders', { method: 'POST', headers: J, body: bytesWith('{"customerId":"c', [0xff], `",${rest}`) }],
  [
    'invalid UTF-8 (lone continuation 0x80) inside sku',
    '/orders',
    { method: 'POST', headers: J, body: bytesWith(`{"customerId":"c","currency":"EUR","items":[{"sku":"s`, [0x80], `","quantity":1,"unitPriceCents":1}]}`) },
  ],
  ['overlong UTF-8 encoding of "/" (c0 af)', '/orders', { method: 'POST', headers: J, body: bytesWith('{"customerId":"c', [0xc0, 0xaf], `",${rest}`) }],
  ['CESU surrogate bytes (ed a0 80)', '/orders', { method: 'POST', headers: J, body: bytesWith('{"customerId":"c', [0xed, 0xa0, 0x80], `",${rest}`) }],
  [
    'UTF-16LE body',
    '/orders',
    { method: 'POST', headers: { 'content-type': 'application/json; charset=utf-16' }, body: new Uint8Array(Buffer.from(valid(), 'utf16le')) },
  ],
  ['__proto__ key', '/orders', { method: 'POST', headers: J, body: `{"__proto__":{"x":1},${valid().slice(1)}` }],
  ['__proto__ in item', '/orders', { method: 'POST', headers: J, body: valid().replace('"sku"', '"__proto__":{"admin":true},"sku"') }],
  ['constructor key', '/orders', { method: 'POST', headers: J, body: `{"constructor":{"prototype":{"x":1}},${valid().slice(1)}` }],
  ['prototype key', '/orders', { method: 'POST', headers: J, body: `{"prototype":1,${valid().slice(1)}` }],
  ['quantity 1e400', '/orders', { method: 'POST', headers: J, body: valid().replace(/"quantity":\d+/, '"quantity":1e400') }],
  [
    'quantity 1000.0000000000001 (parses to 1000)',
    '/orders',
    { method: 'POST', headers: J, body: valid().replace(/"quantity":\d+/, '"quantity":1000.0000001') },
  ],
  ['unitPriceCents 1e8+0.5', '/orders', { method: 'POST', headers: J, body: valid().replace(/"unitPriceCents":\d+/, '"unitPriceCents":100000000.5') }],
  ['deeply nested array', '/orders', { method: 'POST', headers: J, body: `${'['.repeat(30000)}${']'.repeat(30000)}` }],
  [
    'deeply nested object in unknown field',
    '/orders',
    { method: 'POST', headers: J, body: `{"x":${'{"a":'.repeat(12000)}1${'}'.repeat(12000)},${valid().slice(1)}` },
  ],
  ['trailing garbage', '/orders', { method: 'POST', headers: J, body: `${valid()}xyz` }],
  ['two JSON documents', '/orders', { method: 'POST', headers: J, body: `${valid()}${valid()}` }],
  ['NUL in customerId (escaped)', '/orders', { method: 'POST', headers: J, body: valid().replace(/"customerId":"[^"]*"/, '"customerId":"a\\u0000b"') }],
  ['lone surrogate (escaped)', '/orders', { method: 'POST', headers: J, body: valid().replace(/"customerId":"[^"]*"/, '"customerId":"a\\ud800b"') }],
  ['empty body', '/orders', { method: 'POST', headers: J, body: '' }],
  ['whitespace body', '/orders', { method: 'POST', headers: J, body: '   ' }],
  [
    'content-type application/json, application/json',
    '/orders',
    { method: 'POST', headers: { 'content-type': 'application/json, text/plain' }, body: valid() },
  ],
  ['content-type application/jsonp', '/orders', { method: 'POST', headers: { 'content-type': 'application/jsonp' }, body: valid() }],
  [
    'content-type multipart',
    '/orders',
    {
      method: 'POST',
      headers: { 'content-type': 'multipart/form-data; boundary=x' },
      body: `--x\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--x--\r\n`,
    },
  ],
  ['Idempotency-Key empty', '/orders', { method: 'POST', headers: { ...J, 'idempotency-key': '' }, body: valid() }],
  ['Idempotency-Key 256 chars', '/orders', { method: 'POST', headers: { ...J, 'idempotency-key': 'k'.repeat(256) }, body: valid() }],
  ['Idempotency-Key with space', '/orders', { method: 'POST', headers: { ...J, 'idempotency-key': 'a b' }, body: valid() }],
  ['Idempotency-Key with tab', '/orders', { method: 'POST', headers: { ...J, 'idempotency-key': 'a\tb' }, body: valid() }],
  ['Idempotency-Key latin1', '/orders', { method: 'POST', headers: { ...J, 'idempotency-key': 'caf\u00e9' }, body: valid() }],
  ['Idempotency-Key 10 KB', '/orders', { method: 'POST', headers: { ...J, 'idempotency-key': 'k'.repeat(10_000) }, body: valid() }],
  ['cancel: invalid UTF-8 reason', '/orders/nope/cancel', { method: 'POST', headers: J, body: bytesWith('{"reason":"r', [0xfe], '"}') }],
  ['cancel: __proto__ reason', '/orders/nope/cancel', { method: 'POST', headers: J, body: '{"__proto__":{"reason":"x"}}' }],
  ['PUT /orders', '/orders', { method: 'PUT', headers: J, body: valid() }],
  ['PATCH /orders', '/orders', { method: 'PATCH', headers: J, body: valid() }],
  ['DELETE /orders', '/orders', { method: 'DELETE' }],
  ['POST /orders/', '/orders/', { method: 'POST', headers: J, body: valid() }],
  ['POST /orders?x=%zz', '/orders?x=%zz', { method: 'POST', headers: J, body: 'nope' }],
  ['GET /orders/%zz', '/orders/%zz', { method: 'GET' }],
  ['GET /orders/%00', '/orders/%00', { method: 'GET' }],
  ['GET /orders/%ff', '/orders/%ff', { method: 'GET' }],
  ['GET /orders/%ED%A0%80', '/orders/%ED%A0%80', { method: 'GET' }],
  ['GET /orders/<10KB id>', `/orders/${'x'.repeat(10_000)}`, { method: 'GET' }],
  ['POST /orders/%ff/cancel', '/orders/%ff/cancel', { method: 'POST' }],
  ['POST /orders/%00/cancel', '/orders/%00/cancel', { method: 'POST' }],
  ['GET /admin/outbox/failed without ADMIN_TOKEN', '/admin/outbox/failed', { method: 'GET' }],
  ['GET /outbox/stats?%zz', '/outbox/stats/x', { method: 'GET' }],
];

// Accepted on purpose and so not listed: a UTF-8 BOM before the JSON (RFC 8259 lets a parser ignore it), -1e-400
// (it is -0, a valid 0), a bidi override in a text field (a format character, not a control character).
describe('bad request bodies - each is a 4xx problem+json and stores nothing', () => {
  it.each(cases)('%s', async (_label, path, init) => {
    await using a = await createExampleApp();
    const before = await orderTableCounts(a.client);
    const res = await a.app.request(path, init);
    const text = await res.text();
    const after = await orderTableCounts(a.client);
    const ok = res.status >= 400 && res.status < 500 && res.headers.get('content-type') === 'application/problem+json';
    expect({ status: res.status, type: res.headers.get('content-type'), stored: after, body: ok ? '' : text.slice(0, 300) }).toEqual({
      status: expect.any(Number),
      type: 'application/problem+json',
      stored: before,
      body: '',
    });
    expect(res.status).toBeGreaterThanOrEqual(400);
    expect(res.status).toBeLessThan(500);
    // a valid request still works
    expect((await a.app.request('/orders', { method: 'POST', headers: J, body: valid() })).status).toBe(201);
  });
});
