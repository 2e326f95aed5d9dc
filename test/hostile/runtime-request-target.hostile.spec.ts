// The production entries of every runtime over a raw socket: the request target and Host header decide the route only
// as a URL can be made of them. What Node's entry refuses with a 400 problem (serve-node.ts, a Host that is no host)
// must not be served as another route, or answered without problem+json, on Bun or Deno; Host values at the edges and
// absolute-form targets are served on the request target's route or refused with a 400 problem, never a 500; a body
// sent without a Host header still reaches the app.
import net from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTempDir } from '../support/db.ts';
import { orderBody } from '../support/example-orders.ts';
import { RUNTIMES, spawnService, waitForHttp, type Runtime, type ServiceHandle } from '../support/process.ts';

type Raw = { status: number; head: string; body: string };

function raw(port: number, request: string): Promise<Raw> {
  return new Promise((resolve, reject) => {
    let out = '';
    const s = net.connect(port, '127.0.0.1', () => s.write(request));
    s.setEncoding('latin1').on('data', (d: string) => (out += d));
    s.on('error', reject);
    s.setTimeout(5000, () => s.destroy());
    s.on('close', () => {
      const i = out.indexOf('\r\n\r\n');
      const head = i < 0 ? out : out.slice(0, i);
      let body = i < 0 ? '' : out.slice(i + 4);
      if (/\r\ntransfer-encoding: chunked/i.test(head)) body = body.replace(/^[0-9a-f]+\r\n|\r\n0\r\n\r\n$/g, '');
      resolve({ status: Number(head.split(' ')[1]), head, body });
    });
  });
}

const contentType = (r: Raw) => /\r\ncontent-type: ([^\r]*)/i.exec(r.head)?.[1];

describe.each(RUNTIMES)('runtime %s - Host headers and request targets', (runtime: Runtime) => {
  let service: ServiceHandle;
  let tmp: { dir: string; [Symbol.dispose](): void };
  beforeAll(async () => {
    tmp = createTempDir();
    service = await spawnService(runtime, `src/entry/${runtime}.ts`, { DATABASE_URL: `file:${join(tmp.dir, 'app.db')}`, ROLES: 'api', LOG_LEVEL: 'warn' });
    await waitForHttp(`${service.url}/health`, { child: service, timeoutMs: 30_000 });
  }, 40_000);
  afterAll(async () => {
    await service?.kill9();
    tmp?.[Symbol.dispose]();
  });

  it('an HTTP/1.0 request without a Host header to /health answers 200 {"status":"ok"}', async () => {
    const res = await raw(service.port, 'GET /health HTTP/1.0\r\n\r\n');
    expect(res.status, res.head + res.body).toBe(200);
    expect(JSON.parse(res.body)).toEqual({ status: 'ok' });
  });

  it.each([
    ['a Host with userinfo (a@b) on /health', 'GET /health HTTP/1.1\r\nHost: a@b\r\nConnection: close\r\n\r\n'],
    ['a Host carrying a path and query (x/metrics?) on /orders/abc', 'GET /orders/abc HTTP/1.1\r\nHost: x/metrics?\r\nConnection: close\r\n\r\n'],
    ['a Host carrying a path (x/openapi.json#) on /orders/abc', 'GET /orders/abc HTTP/1.1\r\nHost: x/openapi.json#\r\nConnection: close\r\n\r\n'],
  ])('%s answers 400 application/problem+json, never another route', async (_label, request) => {
    const res = await raw(service.port, request);
    expect(res.status, res.head + res.body.slice(0, 300)).toBe(400);
    expect(contentType(res)).toBe('application/problem+json');
    expect(JSON.parse(res.body)).toMatchObject({ status: 400, type: expect.any(String), title: expect.any(String) });
  });

  it.each([
    ['an IPv4 address with an octet over 255 (1.2.3.256)', '1.2.3.256'],
    ['a number too large for an IPv4 address (4294967296)', '4294967296'],
    ['an empty port (x:)', 'x:'],
    ['an IPv6 address with an empty port ([::1]:)', '[::1]:'],
    ['port 0 (x:0)', 'x:0'],
    ['an uppercase name and port (LOCALHOST:8080)', 'LOCALHOST:8080'],
    ['a trailing dot (localhost.)', 'localhost.'],
    ['a comma (a,b)', 'a,b'],
    ['a zero-padded port (x:00080)', 'x:00080'],
    ['a port over 65535 (x:65536)', 'x:65536'],
    ['an unclosed IPv6 bracket ([::1)', '[::1'],
  ])('GET /health with Host %s answers 200 {"status":"ok"} or a 400 problem, never another answer', async (_label, host) => {
    const res = await raw(service.port, `GET /health HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
    if (res.status === 400) expect(contentType(res), res.head + res.body.slice(0, 300)).toBe('application/problem+json');
    else {
      expect(res.status, res.head + res.body.slice(0, 300)).toBe(200);
      expect(JSON.parse(res.body)).toEqual({ status: 'ok' });
    }
  });

  it.each([
    ['an empty Host header', 'GET /health HTTP/1.1\r\nHost: \r\nConnection: close\r\n\r\n'],
    ['an empty Host header on a two-segment path', 'GET /orders/abc HTTP/1.1\r\nHost: \r\nConnection: close\r\n\r\n'],
    ['an HTTP/1.0 request without Host on a two-segment path', 'GET /orders/abc HTTP/1.0\r\n\r\n'],
    ['an uppercase IPv6 Host ([::ABCD]:8080)', 'GET /orders/abc HTTP/1.1\r\nHost: [::ABCD]:8080\r\nConnection: close\r\n\r\n'],
  ])('%s is routed on the request target: GET /orders/abc answers 404/400 problem, /health 200', async (_label, request) => {
    const res = await raw(service.port, request);
    const onHealth = request.startsWith('GET /health');
    if (onHealth) {
      expect(res.status, res.head + res.body.slice(0, 300)).toBe(200);
      expect(JSON.parse(res.body)).toEqual({ status: 'ok' });
    } else {
      expect([400, 404], res.head + res.body.slice(0, 300)).toContain(res.status);
      expect(contentType(res)).toBe('application/problem+json');
    }
  });

  it('a POST /orders with a JSON body over HTTP/1.0 without a Host header answers 201 and stores the order', async () => {
    const body = JSON.stringify(orderBody());
    const res = await raw(service.port, `POST /orders HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    expect(res.status, res.head + res.body.slice(0, 300)).toBe(201);
    const created = JSON.parse(res.body) as { id?: string; orderId?: string };
    const id = created.id ?? created.orderId;
    const got = await fetch(`${service.url}/orders/${id}`);
    expect(got.status).toBe(200);
  });

  it('an absolute-form request target (GET http://x/health) answers 200 {"status":"ok"}', async () => {
    const res = await raw(service.port, `GET http://x/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    expect(res.status, res.head + res.body.slice(0, 300)).toBe(200);
    expect(JSON.parse(res.body)).toEqual({ status: 'ok' });
  });

  it('an absolute-form target with userinfo (GET http://a@x/health) answers 200 or a 400 problem, never another answer', async () => {
    const res = await raw(service.port, `GET http://a@x/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    if (res.status === 400) expect(contentType(res), res.head + res.body.slice(0, 300)).toBe('application/problem+json');
    else expect(res.status, res.head + res.body.slice(0, 300)).toBe(200);
  });
});
