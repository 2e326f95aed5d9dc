// Malformed HTTP over a raw socket against the service's own Node entry (serveOnNode) with the example composition
// and ADMIN_TOKEN: every answer is a 4xx problem+json (a 501 for a transfer coding other than chunked; never a 500,
// a hang or a crash), nothing is stored, no admin action runs without the token, and a valid request still works
// afterwards. What Node's HTTP parser refuses itself (a bad or duplicate Content-Length, one with chunked, a bad chunk
// size, an unknown method, raw non-ASCII in the target, obs-fold, a header name with a space, headers over 16 KiB, an
// Expect other than 100-continue) is answered by src/entry/parse-error-answer.ts; a body that is no UTF-8 and a
// content or transfer coding by requireJson (src/http/json-body.ts). Own nats-server (useNats).
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { APP_MIGRATIONS } from '../../src/entry/boot.ts';
import { serveOnNode } from '../../src/entry/serve-node.ts';
import { silentLogger, type Logger } from '../../src/logger.ts';
import { modules } from '../../src/modules.ts';
import { orderTableCounts } from './support.ts';
import { orderBody } from '../support/example-orders.ts';
import { createTestService } from '../support/service.ts';
import { freshStream, streamEnv } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();
const TOKEN = 'adversarial-admin-token-0123456789';

function raw(port: number, request: string | Buffer, waitMs = 4000): Promise<{ status: number; head: string; body: string; timedOut: boolean }> {
  return new Promise((resolve) => {
    let out = '';
    let timedOut = false;
    const s = net.connect(port, '127.0.0.1', () => s.write(request));
    const timer = setTimeout(() => ((timedOut = true), s.destroy()), waitMs);
    s.setEncoding('latin1').on('data', (d: string) => (out += d));
    s.on('error', () => undefined);
    s.on('close', () => {
      clearTimeout(timer);
      const i = out.indexOf('\r\n\r\n');
      const head = i < 0 ? out : out.slice(0, i);
      resolve({ status: Number(head.split(' ')[1]), head, body: i < 0 ? '' : out.slice(i + 4), timedOut });
    });
  });
}

let s: Awaited<ReturnType<typeof createTestService>>;
let port = 0;
let close: () => Promise<void>;
beforeAll(async () => {
  const stream = await freshStream(nats().nc, 'ADVR');
  s = await createTestService(
    { ROLES: 'api', NATS_URL: nats().url, ...streamEnv(stream), ADMIN_TOKEN: TOKEN },
    { modules },
    { migrations: APP_MIGRATIONS.service },
  );
  const log: Logger = { ...silentLogger, info: (msg, fields) => void (msg === 'listening' && (port = Number(fields?.port))) };
  close = serveOnNode({ config: { ...s.config, PORT: 0, HOST: '127.0.0.1' }, log, service: s.service, client: s.client });
  for (let i = 0; i < 300 && port === 0; i++) await new Promise((r) => setTimeout(r, 10));
  await s.client.execute(
    `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, attempts, last_error, occurred_at, available_at) VALUES ('f1', 'order', 'o1', 'order.gone.v1', '{}', 'failed', 5, 'x', 0, 0)`,
  );
});
afterAll(async () => {
  await close?.();
  await s?.close();
});

const body = JSON.stringify(orderBody());
const len = Buffer.byteLength(body);
const post = (extra: string, b = body, cl: string | null = String(len)) =>
  `POST /orders HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\n${cl === null ? '' : `Content-Length: ${cl}\r\n`}${extra}\r\n${b}`;
const chunk = (b: string) => `${Buffer.byteLength(b).toString(16)}\r\n${b}\r\n`;

const cases: Array<[string, string | Buffer]> = [
  ['Content-Length too small (body truncated JSON)', post('', body, '10')],
  ['Content-Length non-numeric', post('', body, 'abc')],
  ['Content-Length negative', post('', body, '-1')],
  ['Content-Length with plus sign', post('', body, `+${len}`)],
  ['Content-Length huge (2^64)', post('', body, '18446744073709551616')],
  ['two Content-Length differing', post(`Content-Length: ${len + 1}\r\n`)],
  ['Content-Length and chunked', post('Transfer-Encoding: chunked\r\n', `${chunk(body)}0\r\n\r\n`)],
  ['chunked body invalid chunk size', post('Transfer-Encoding: chunked\r\n', `zz\r\n${body}\r\n0\r\n\r\n`, null)],
  [
    'chunked body > 64 KiB',
    post('Transfer-Encoding: chunked\r\n', `${chunk(JSON.stringify({ ...orderBody(), pad: 'x'.repeat(40_000) }))}${chunk('x'.repeat(40_000))}0\r\n\r\n`, null),
  ],
  [
    'chunked body with invalid UTF-8 in customerId',
    Buffer.concat([
      Buffer.from(post('Transfer-Encoding: chunked\r\n', '', null)),
      Buffer.from(`${(Buffer.byteLength(body) + 1).toString(16)}\r\n`),
      (() => {
        const b = Buffer.from(body);
        const i = b.indexOf('"customerId":"') + 14;
        return Buffer.concat([b.subarray(0, i), Buffer.from([0xff]), b.subarray(i)]);
      })(),
      Buffer.from('\r\n0\r\n\r\n'),
    ]),
  ],
  ['Transfer-Encoding gzip, chunked', post('Transfer-Encoding: gzip, chunked\r\n', `${chunk(body)}0\r\n\r\n`, null)],
  ['Content-Encoding gzip with plain JSON body', post('Content-Encoding: gzip\r\n')],
  ['two Content-Type headers (json then text)', post('Content-Type: text/plain\r\n')],
  ['two Idempotency-Key headers', post('Idempotency-Key: a\r\nIdempotency-Key: b\r\n')],
  ['Idempotency-Key with obs-text bytes', Buffer.from(post('Idempotency-Key: k\u00ff\u00fe\r\n'), 'latin1')],
  ['Idempotency-Key 8000 chars', post(`Idempotency-Key: ${'k'.repeat(8000)}\r\n`)],
  ['Expect: 100-continue oddity', post('Expect: 999-weird\r\n')],
  ['traceparent garbage + body invalid', post('traceparent: 00-zz-zz-zz\r\ntracestate: ,,,=,=\r\n', '{"x":1}', '7')],
  ['unknown method FOO', 'FOO /orders HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n'],
  ['PROPFIND /orders', 'PROPFIND /orders HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n'],
  ['TRACE /orders', 'TRACE /orders HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n'],
  ['HTTP/1.0 POST without length', `POST /orders HTTP/1.0\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n${body}`],
  [
    'absolute-form target to another host',
    `POST http://evil.example/orders HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{"x":1}`,
  ],
  ['asterisk target', 'OPTIONS * HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n'],
  ['path with raw UTF-8 bytes', Buffer.from('GET /orders/\u00e9\u00ff HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n', 'latin1')],
  ['query with invalid percent', 'GET /orders/x?a=%zz&b=%ff&c=%00 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n'],
  ['header with obs-fold', post('X-Correlation-Id: a\r\n b\r\n')],
  ['header name with space', post('Bad Header: x\r\n')],
  ['header > 16 KiB', post(`X-Big: ${'a'.repeat(20_000)}\r\n`)],
  ['admin: no token', 'POST /admin/outbox/failed/retry-all HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n'],
  [
    'admin: wrong token then right token',
    `POST /admin/outbox/failed/retry-all HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\nAuthorization: Bearer wrong-token-000000000000\r\nAuthorization: Bearer ${TOKEN}\r\n\r\n`,
  ],
  [
    'admin: token in query string',
    `POST /admin/outbox/failed/retry-all?access_token=${TOKEN} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`,
  ],
  [
    'admin: Basic with token',
    `POST /admin/outbox/failed/retry-all HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\nAuthorization: Basic ${Buffer.from(`x:${TOKEN}`).toString('base64')}\r\n\r\n`,
  ],
  [
    'admin: token prefix',
    `POST /admin/outbox/failed/retry-all HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\nAuthorization: Bearer ${TOKEN.slice(0, -1)}\r\n\r\n`,
  ],
  [
    'admin: token + suffix',
    `POST /admin/outbox/failed/retry-all HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\nAuthorization: Bearer ${TOKEN}x\r\n\r\n`,
  ],
  [
    'admin: method override header',
    `GET /admin/outbox/failed/retry-all HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nX-HTTP-Method-Override: POST\r\n\r\n`,
  ],
  [
    'admin: absolute-form with userinfo',
    `POST http://x:${TOKEN}@localhost/admin/outbox/failed/retry-all HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`,
  ],
  ['admin: fragment-looking path', `POST /admin/outbox/failed/retry-all%23 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`],
  ['admin: HEAD failed listing', `HEAD /admin/outbox/failed HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`],
];

describe('raw HTTP - malformed requests', () => {
  it.each(cases)('%s: a 4xx problem+json (501 for a transfer coding it does not take), nothing stored, the failed row untouched', async (label, request) => {
    const before = await orderTableCounts(s.client);
    const res = await raw(port, request);
    const after = await orderTableCounts(s.client);
    const failed = (await s.client.execute(`SELECT status FROM outbox WHERE id = 'f1'`)).rows[0]?.status;
    expect(
      {
        timedOut: res.timedOut,
        // RFC 9112 6.1: a transfer coding the server does not understand is a 501
        status4xx: (res.status >= 400 && res.status < 500) || (res.status === 501 && label.startsWith('Transfer-Encoding')),
        problem: /\r\ncontent-type: application\/problem\+json/i.test(res.head) || (res.head.startsWith('HTTP/1.1 401') && /^HEAD/.test(String(request))),
        stored: after,
        failed,
      },
      `${res.head}\n${res.body.slice(0, 300)}`,
    ).toEqual({ timedOut: false, status4xx: true, problem: true, stored: before, failed: 'failed' });
    const ok = await raw(port, post(''));
    expect(ok.status, ok.body).toBe(201);
  });

  it.each([
    ['limit=0x10', 'limit=0x10'],
    ['limit=%20100%20', 'limit=%20100%20'],
    ['limit=1e3', 'limit=1e3'],
    ['limit= ', 'limit=%20'],
    ['limit repeated', 'limit=1&limit=2'],
    ['after=-1', 'after=-1'],
    ['after=1e308', 'after=1e308'],
    ['after=9007199254740993', 'after=9007199254740993'],
    ['after=abc', 'after=abc'],
    ['after=0x1', 'after=0x1'],
    ['after empty', 'after='],
    ['after[]', 'after[]=1'],
    ['__proto__', '__proto__=1&constructor=2'],
    ['limit=Infinity', 'limit=Infinity'],
    ['limit=-0', 'limit=-0'],
    ['after=1.5', 'after=1.5'],
  ])('admin listing with %s answers < 500 with the token', async (_label, q) => {
    const res = await raw(port, `GET /admin/outbox/failed?${q} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer ${TOKEN}\r\n\r\n`);
    expect(res.status, `${res.head}\n${res.body.slice(0, 400)}`).toBeLessThan(500);
    if (res.status >= 400) expect(res.head).toMatch(/content-type: application\/problem\+json/i);
    if (res.status === 200) expect(res.body, q).toMatch(/items/);
    console.log(`ADMIN ${q} → ${res.status} ${res.body.replace(/^[0-9a-f]+\r\n/, '').slice(0, 160)}`);
  });
});

describe('raw HTTP - pipelined bad and good requests on one connection', () => {
  it('a 415, a 400, a 413 and a valid order pipelined are answered in order; only the last stores an order', async () => {
    const before = await orderTableCounts(s.client);
    const big = JSON.stringify({ ...orderBody(), pad: 'x'.repeat(70_000) });
    const req =
      `POST /orders HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain\r\nContent-Length: ${len}\r\n\r\n${body}` +
      `POST /orders HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n{"a":` +
      `POST /orders HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${big.length}\r\n\r\n${big}` +
      `POST /orders HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ${len}\r\n\r\n${body}`;
    const res = await raw(port, req, 8000);
    const statuses = [...`${res.head}\r\n\r\n${res.body}`.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
    expect({ statuses, timedOut: res.timedOut }).toEqual({ statuses: [415, 400, 413, 201], timedOut: false });
    const after = await orderTableCounts(s.client);
    expect(after.orders).toBe(before.orders! + 1);
  });
});
