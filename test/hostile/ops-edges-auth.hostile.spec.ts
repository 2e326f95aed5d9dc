// The admin surfaces over real HTTP (@hono/node-server, raw request lines so no client normalizes the path): path
// tricks, methods and mangled tokens never reach an admin action, every refusal is a problem+json, and a refused
// request changes nothing. Real libSQL files and a real nats-server.
import { serve } from '@hono/node-server';
import { createClient } from '@libsql/client';
import net, { type AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { createSubscriberDb } from '../support/consumer.ts';
import { fixtureModules } from '../support/fixture/modules.ts';
import { createTestService } from '../support/service.ts';
import { freshStream, streamEnv } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();
const TOKEN = 'test-admin-token-0123456789';

/** One raw HTTP/1.1 exchange: the status, the content type and the body. */
function raw(port: number, method: string, target: string, headers: string[] = []): Promise<{ status: number; type: string | undefined; body: string }> {
  return new Promise((resolve, reject) => {
    let out = '';
    const s = net.connect(port, '127.0.0.1', () =>
      s.write(`${method} ${target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n${headers.map((h) => `${h}\r\n`).join('')}\r\n`),
    );
    s.setEncoding('utf8').on('data', (d: string) => (out += d));
    s.on('error', reject);
    s.on('close', () => {
      const [head = '', body = ''] = out.split('\r\n\r\n');
      resolve({ status: Number(head.split(' ')[1]), type: /\r\ncontent-type: ([^\r]+)/i.exec(head)?.[1], body });
    });
  });
}

/** A service with the api and consumers roles and ADMIN_TOKEN, served on a loopback port, with one failed outbox row and one dead letter. */
async function startService() {
  const stream = await freshStream(nats().nc, 'AUTH');
  const sdb = { balances: await createSubscriberDb({ subscriber: 'balances' }), audit: await createSubscriberDb({ subscriber: 'audit' }) };
  const s = await createTestService(
    { ROLES: 'api,consumers', NATS_URL: nats().url, ...streamEnv(stream), ADMIN_TOKEN: TOKEN },
    { modules: fixtureModules, openSubscriberDb: async (name) => createClient({ url: sdb[name as keyof typeof sdb].url, timeout: 5000 }) },
  );
  await s.client.execute(
    `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, attempts, last_error, occurred_at, available_at) VALUES ('f1', 'account', 'a1', 'account.gone.v1', '{}', 'failed', 5, 'not registered', 0, 0)`,
  );
  await sdb.balances.client.execute(
    `INSERT INTO dead_letters (event_id, consumer, subject, payload, error, deliveries, dead_at) VALUES ('d1', 'balances', 'x.account.a1', 'not json', 'payload is not JSON', 2, 0)`,
  );
  const server = serve({ fetch: s.app.fetch, port: 0, hostname: '127.0.0.1' });
  await new Promise((r) => server.once('listening', r));
  const port = (server.address() as AddressInfo).port;
  const state = async () => ({
    outbox: (await s.client.execute('SELECT id, status FROM outbox ORDER BY seq')).rows.map((r) => `${r.id}:${r.status}`),
    deadLetters: (await sdb.balances.client.execute('SELECT event_id FROM dead_letters')).rows.map((r) => String(r.event_id)),
  });
  const close = async () => {
    await new Promise<void>((r) => server.close(() => r()));
    await s.close();
    sdb.balances.close();
    sdb.audit.close();
  };
  return { ...s, port, state, close, [Symbol.asyncDispose]: close };
}

describe('admin surfaces - path tricks and mangled tokens', () => {
  it('no path spelling, method or mangled token reaches an admin action: each is a 401 or 404 problem+json and the failed row and dead letter stay', async () => {
    await using s = await startService();
    const before = await s.state();
    expect(before).toEqual({ outbox: ['f1:failed'], deadLetters: ['d1'] });
    const targets: Array<[string, string]> = [
      ['POST', '/admin/outbox/failed/retry-all'],
      ['POST', '/admin/outbox/failed/f1/retry'],
      ['POST', '//admin/outbox/failed/retry-all'],
      ['POST', '/admin//outbox/failed/retry-all'],
      ['POST', '/admin/outbox/failed/retry-all/'],
      ['POST', '/%61dmin/outbox/failed/retry-all'],
      ['POST', '/ADMIN/outbox/failed/retry-all'],
      ['POST', '/admin%2Foutbox%2Ffailed%2Fretry-all'],
      ['POST', '/x/../admin/outbox/failed/retry-all'],
      ['POST', '/admin/outbox/./failed/retry-all'],
      ['POST', '/admin/outbox/failed/retry-all;x'],
      ['POST', '/admin/outbox/failed/f1%2Fretry'],
      ['POST', '/admin/subscribers/balances/dead-letters/replay-all'],
      ['POST', '/admin/subscribers/balances/dead-letters/d1/replay'],
      ['DELETE', '/admin/subscribers/balances/dead-letters?confirm=all'],
      ['DELETE', '/admin/subscribers/balances/dead-letters/d1'],
      ['DELETE', '//admin/subscribers/balances/dead-letters/d1'],
      ['DELETE', '/admin/subscribers%2Fbalances/dead-letters/d1'],
      ['DELETE', '/admin/subscribers/balances%2Fdead-letters%2Fd1'],
      ['GET', '/admin/outbox/failed/retry-all'],
      ['HEAD', '/admin/outbox/failed'],
      ['OPTIONS', '/admin/outbox/failed/retry-all'],
      ['PUT', '/admin/outbox/failed/retry-all'],
    ];
    const mangled = [
      [],
      ['X-HTTP-Method-Override: POST'],
      [`Authorization: Bearer ${TOKEN.toUpperCase()}`],
      [`Authorization: Bearer ${TOKEN.slice(0, -1)}`],
      [`Authorization: Bearer ${TOKEN}x`],
      [`Authorization: Bearer ${TOKEN.slice(0, 8)}`],
      [`Authorization: Bearer ${TOKEN}${'A'.repeat(8000)}`],
      [`Authorization: Basic ${TOKEN}`],
      [`Authorization: ${TOKEN}`],
      [`Authorization: Bearer${TOKEN}`],
      [`Authorization: Bearer ${TOKEN},${TOKEN}`],
      ['Authorization: Bearer'],
      [`Authorization: Bearer x`, `Authorization: Bearer ${TOKEN}`],
      [`X-Authorization: Bearer ${TOKEN}`],
    ];
    for (const [method, target] of targets) {
      for (const headers of mangled) {
        const res = await raw(s.port, method, target, headers);
        const what = `${method} ${target} ${headers.join(' | ').slice(0, 60)}`;
        expect([401, 404], what).toContain(res.status);
        expect(res.type, what).toBe('application/problem+json');
        if (method !== 'HEAD') expect(JSON.parse(res.body), what).toMatchObject({ status: res.status, type: expect.any(String), title: expect.any(String) });
      }
    }
    expect(await s.state()).toEqual(before);
  }, 60_000);

  it("/status.json shows the recent errors' details to the same Authorization headers the admin routes accept (the scheme is case-insensitive)", async () => {
    await using s = await startService();
    for (const header of [`bearer ${TOKEN}`, `BEARER ${TOKEN}`, `Bearer  ${TOKEN}`]) {
      // the admin routes take it…
      expect((await raw(s.port, 'GET', '/admin/outbox/failed', [`Authorization: ${header}`])).status, header).toBe(200);
      // …so the status must treat its sender as the operator too
      const status = await raw(s.port, 'GET', '/status.json', [`Authorization: ${header}`]);
      expect((JSON.parse(status.body) as { errorDetails: boolean }).errorDetails, header).toBe(true);
    }
  });
});

describe('admin surfaces - confirmations', () => {
  it('deleting every dead letter refuses an ambiguous confirmation (confirm given twice, once not "all") with a 400 problem and deletes nothing', async () => {
    await using s = await startService();
    const res = await raw(s.port, 'DELETE', '/admin/subscribers/balances/dead-letters?confirm=all&confirm=no', [`Authorization: Bearer ${TOKEN}`]);
    expect(await s.state()).toEqual({ outbox: ['f1:failed'], deadLetters: ['d1'] });
    expect(res.status).toBe(400);
    expect(res.type).toBe('application/problem+json');
  });
});
