// Clients that abort or stall mid-body against the service's Node entry: the process must not crash, must not log
// an unhandled (500) error for a request that simply went away, must store nothing, and must keep serving others.
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
const errors: string[] = [];
const log: Logger = {
  ...silentLogger,
  info: (msg, fields) => void (msg === 'listening' && (port = Number(fields?.port))),
  error: (msg, fields) => void errors.push(`${msg} ${String((fields?.error as Error | undefined)?.message ?? '')}`),
};
let s: Awaited<ReturnType<typeof createTestService>>;
let port = 0;
let close: () => Promise<void>;
beforeAll(async () => {
  const stream = await freshStream(nats().nc, 'ADVA');
  s = await createTestService({ ROLES: 'api', NATS_URL: nats().url, ...streamEnv(stream) }, { modules, log }, { migrations: APP_MIGRATIONS.service });
  close = serveOnNode({ config: { ...s.config, PORT: 0, HOST: '127.0.0.1' }, log, service: s.service, client: s.client });
  for (let i = 0; i < 300 && port === 0; i++) await new Promise((r) => setTimeout(r, 10));
});
afterAll(async () => {
  await close?.();
  await s?.close();
});

const body = JSON.stringify(orderBody());
const head = (extra: string) => `POST /orders HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n${extra}\r\n`;

function sendAndAbort(data: string, afterMs: number): Promise<void> {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1', () => {
      sock.write(data);
      setTimeout(() => (sock.destroy(), resolve()), afterMs);
    });
    sock.on('error', () => undefined);
  });
}

async function validWorks(): Promise<number> {
  const res = await fetch(`http://127.0.0.1:${port}/orders`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  return res.status;
}

describe('aborted and stalled bodies', () => {
  it('a client that aborts mid-body (Content-Length or chunked) stores nothing, logs no unhandled error and the service keeps serving', async () => {
    const before = await orderTableCounts(s.client);
    const seen: Record<string, number> = {};
    const variants: Array<[string, (i: number) => string]> = [
      ['content-length, 20 bytes sent', () => head(`Content-Length: ${body.length}\r\n`) + body.slice(0, 20)],
      ['chunked, one chunk sent', () => `${head('Transfer-Encoding: chunked\r\n')}${(40).toString(16)}\r\n${body.slice(0, 40)}\r\n`],
      [
        'content-length + key, all but one byte',
        (i) => head(`Content-Length: ${body.length}\r\nIdempotency-Key: abort-${i}\r\n`) + body.slice(0, body.length - 1),
      ],
    ];
    for (const [label, make] of variants) {
      const n = errors.length;
      for (let i = 0; i < 5; i++) await sendAndAbort(make(i), 30);
      await new Promise((r) => setTimeout(r, 200));
      seen[label] = errors.length - n;
    }
    // found: the chunked variant logs "unhandled error aborted" at error level once per request (app.onError's 500 path)
    expect(seen).toEqual({ 'content-length, 20 bytes sent': 0, 'chunked, one chunk sent': 0, 'content-length + key, all but one byte': 0 });
    expect(await orderTableCounts(s.client)).toEqual(before);
    expect(errors).toEqual([]);
    expect(await validWorks()).toBe(201);
  });

  it('a stalled body does not hold up other requests', async () => {
    const sock = net.connect(port, '127.0.0.1', () => sock.write(head(`Content-Length: ${body.length}\r\n`) + body.slice(0, 5)));
    sock.on('error', () => undefined);
    await new Promise((r) => setTimeout(r, 100));
    const t0 = Date.now();
    expect(await validWorks()).toBe(201);
    expect(Date.now() - t0).toBeLessThan(2000);
    sock.destroy();
  });

  it('a client that disconnects right after sending a valid order with an Idempotency-Key: a retry with the key replays, one order', async () => {
    const before = (await orderTableCounts(s.client)).orders!;
    errors.length = 0;
    await sendAndAbort(head(`Content-Length: ${body.length}\r\nIdempotency-Key: gone-1\r\n`) + body, 0);
    await new Promise((r) => setTimeout(r, 300));
    const res = await fetch(`http://127.0.0.1:${port}/orders`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': 'gone-1' },
      body,
    });
    expect([200, 201]).toContain(res.status);
    expect((await orderTableCounts(s.client)).orders).toBe(before + 1);
    expect(errors).toEqual([]);
  });
});
