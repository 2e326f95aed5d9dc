// The service's own Node entry (serveOnNode, @hono/node-server) over a real socket: a request the adapter cannot turn
// into a URL (a backslash in the path, a Host header that is no host) must still be answered as the API promises
// ("every error is RFC 9457 application/problem+json", /openapi.json), not an empty 400 with no Content-Type.
// What Node's own HTTP parser refuses before any request exists (431, a malformed request line) is answered by
// src/entry/parse-error-answer.ts: see test/example/malformed-http-requests.hostile.spec.ts. So is CONNECT, which Node
// hands to the server's 'connect' event instead of the request listener (without a listener it closes the socket
// without writing a byte): the service is no proxy, and answers 501.
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { serveOnNode } from '../../src/entry/serve-node.ts';
import { silentLogger, type Logger } from '../../src/logger.ts';
import { createTestService } from '../support/service.ts';
import { freshStream, streamEnv } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

function raw(port: number, request: string): Promise<{ status: number; head: string; body: string }> {
  return new Promise((resolve, reject) => {
    let out = '';
    const s = net.connect(port, '127.0.0.1', () => s.write(request));
    s.setEncoding('latin1').on('data', (d: string) => (out += d));
    s.on('error', reject);
    s.on('close', () => {
      const i = out.indexOf('\r\n\r\n');
      const head = i < 0 ? out : out.slice(0, i);
      resolve({ status: Number(head.split(' ')[1]), head, body: i < 0 ? '' : out.slice(i + 4) });
    });
  });
}

/** Serves the fixture service (ROLES=api) through serveOnNode on a free port and runs `fn` against it. */
async function withNodeEntry(fn: (port: number) => Promise<void>): Promise<void> {
  const stream = await freshStream(nats().nc, 'ADVT');
  await using s = await createTestService({ ROLES: 'api', NATS_URL: nats().url, ...streamEnv(stream) });
  let port = 0;
  const log: Logger = { ...silentLogger, info: (msg, fields) => void (msg === 'listening' && (port = Number(fields?.port))) };
  const close = serveOnNode({ config: { ...s.config, PORT: 0, HOST: '127.0.0.1' }, log, service: s.service, client: s.client });
  try {
    for (let i = 0; i < 200 && port === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect((await raw(port, HEALTH)).status).toBe(200);
    await fn(port);
  } finally {
    await close();
  }
}

const HEALTH = 'GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n';

describe('node entry - request targets the adapter refuses', () => {
  it.each([
    ['a backslash in the path', 'GET /orders\\x HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n'],
    ['a Host header that is no host', 'GET /health HTTP/1.1\r\nHost: a@b\r\nConnection: close\r\n\r\n'],
  ])('%s → a 400 application/problem+json with the RFC 9457 members', async (_label, request) => {
    await withNodeEntry(async (port) => {
      const res = await raw(port, request);
      expect(res.status).toBe(400);
      expect(res.head).toMatch(/\r\ncontent-type: application\/problem\+json/i); // not an empty body without Content-Type
      const body = res.body.replace(/^[0-9a-f]+\r\n|\r\n0\r\n\r\n$/g, '');
      expect(JSON.parse(body)).toMatchObject({ status: 400, type: expect.any(String), title: expect.any(String) });
    });
  });
});

describe('node entry - CONNECT', () => {
  it.each([
    ['authority-form (a tunnel request)', 'CONNECT 127.0.0.1:80 HTTP/1.1\r\nHost: 127.0.0.1:80\r\n\r\n'],
    ['origin-form to a route', 'CONNECT /orders HTTP/1.1\r\nHost: localhost\r\n\r\n'],
  ])('%s is answered 501 application/problem+json instead of a closed socket, and the server keeps serving', async (_label, request) => {
    await withNodeEntry(async (port) => {
      const res = await raw(port, request);
      expect(res.status, JSON.stringify(res.head)).toBe(501);
      expect(res.head).toMatch(/\r\ncontent-type: application\/problem\+json/i);
      expect(JSON.parse(res.body)).toMatchObject({ status: 501, type: expect.any(String), title: expect.any(String) });
      expect((await raw(port, HEALTH)).status).toBe(200);
    });
  });
});
