// GET /ready tells the truth about this process: ready, degraded (with reasons) while it can still do its work, and
// 503 unavailable only when it cannot — the service database does not answer, or a role stopped for good.
import { createClient } from '@libsql/client';
import { createServer, type Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { createApp } from '../../src/app.ts';
import { registryOf } from '../../src/compose/define-modules.ts';
import { createDatabase } from '../../src/db/open-database.ts';
import { createDeps } from '../../src/deps.ts';
import { createReadinessCheck, type ReadinessReport } from '../../src/http/readiness.ts';
import { silentLogger } from '../../src/logger.ts';
import { createSubscriberDb, type SubscriberDb } from '../support/consumer.ts';
import { createTestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { fixtureModules } from '../support/fixture/modules.ts';
import { postJson, type RequestHandler } from '../support/http.ts';
import { startNats } from '../support/nats.ts';
import { freePort } from '../support/process.ts';
import { createTestService } from '../support/service.ts';
import { freshStream, publishRaw, streamEnv } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

/** GET /ready: its HTTP status and body. */
async function ready(app: RequestHandler): Promise<{ http: number; body: ReadinessReport }> {
  const res = await app.request('/ready');
  return { http: res.status, body: (await res.json()) as ReadinessReport };
}

/** GET /ready, polled until its body satisfies `accept`. */
async function readyWhen(app: RequestHandler, accept: (body: ReadinessReport) => boolean, what: string): Promise<{ http: number; body: ReadinessReport }> {
  let last: { http: number; body: ReadinessReport } | undefined;
  await eventually(
    async () => {
      last = await ready(app);
      return accept(last.body);
    },
    { what },
  );
  return last!;
}

/** A service with `env`'s roles over its own stream on `natsUrl`, each fixture subscriber in CONSUMERS on a database of its own. */
async function startService(env: Record<string, string>, natsUrl: string) {
  const stream = await freshStream(nats().nc, 'READY');
  const sdbs = new Map<string, SubscriberDb>();
  for (const name of (env.CONSUMERS ?? '').split(',').filter(Boolean)) sdbs.set(name, await createSubscriberDb({ subscriber: name }));
  const s = await createTestService(
    { NATS_URL: natsUrl, ...streamEnv(stream), ...env },
    { openSubscriberDb: async (name) => createClient({ url: sdbs.get(name)!.url, timeout: 5000 }) },
  );
  const close = async () => {
    await s.close();
    for (const sdb of sdbs.values()) sdb.close();
  };
  return { ...s, stream, close, [Symbol.asyncDispose]: close };
}

/** The fixture's app over a libSQL server at `url` that is not one. */
function appOverRemoteDatabase(url: string) {
  const client = createClient({ url });
  const app = createApp(createDeps(createDatabase(client), silentLogger, registryOf(fixtureModules)), { contexts: fixtureModules.contexts });
  return { app, [Symbol.dispose]: () => client.close() };
}

describe('readiness - ready and degraded', () => {
  it('ready when the database answers and the relay and subscribers run against a reachable broker, each role reported', async () => {
    await using s = await startService({ ROLES: 'api,relay,consumers', CONSUMERS: 'audit' }, nats().url);
    const { http, body } = await readyWhen(
      s.app,
      (b) => b.status === 'ready' && b.relay?.broker === 'connected' && b.subscribers?.[0]?.pending !== null,
      'ready with the relay and the subscriber connected',
    );
    expect(http).toBe(200);
    expect(body).toMatchObject({ status: 'ready', reasons: [], roles: ['api', 'relay', 'consumers'], database: 'ok' });
    expect(body.relay).toMatchObject({ running: true, broker: 'connected', lastSuccessfulPassAt: expect.any(String) });
    expect(body.subscribers).toEqual([{ name: 'audit', running: true, broker: 'connected', database: 'ok', pending: 0, ackPending: 0, deadLetters: 0 }]);
  });

  it('degraded, still 200, while the broker is unreachable from the relay; commands are still accepted', async () => {
    await using own = await startNats();
    await using s = await startService({ ROLES: 'api,relay' }, own.url);
    await readyWhen(s.app, (b) => b.relay?.broker === 'connected', 'the relay connected');
    await own.stop();

    // the command commits into the outbox; the relay meets the outage when it tries to publish it
    expect((await postJson(s.app, '/accounts', { owner: 'ann' })).status).toBe(201);
    const { http, body } = await readyWhen(s.app, (b) => b.status === 'degraded', 'degraded');
    expect(http).toBe(200);
    expect(body.database).toBe('ok');
    expect(body.relay).toMatchObject({ running: true, broker: 'unavailable' });
    expect(body.reasons).toEqual([expect.stringMatching(/^relay: the broker is unavailable/)]);
  });

  it("lists what this instance leases: the relay's outbox partitions, and each subscriber's mode and the partitions it holds", async () => {
    await using s = await startService(
      { ROLES: 'relay,consumers', CONSUMERS: 'audit,balances', CONSUMER_PARTITIONED: 'true', OUTBOX_PARTITIONS: '4' },
      nats().url,
    );
    const all = [0, 1, 2, 3];
    const { http, body } = await readyWhen(
      s.app,
      (b) =>
        b.leases?.relay?.partitions.length === 4 &&
        b.leases.subscribers?.length === 2 &&
        b.leases.subscribers.every((x) => x.partitions.length === 4 && !x.standby),
      'every partition leased',
    );
    expect(http).toBe(200);
    expect(body.status).toBe('ready');
    expect(body.leases?.relay).toMatchObject({ owner: expect.stringMatching(/^instance-/), partitions: all, members: 1 });
    expect(body.leases?.subscribers).toEqual([
      { name: 'audit', mode: 'partitioned', owner: body.leases?.relay?.owner, partitions: all, standby: false, members: 1 },
      { name: 'balances', mode: 'partitioned', owner: body.leases?.relay?.owner, partitions: all, standby: false, members: 1 },
    ]);
  });

  it('degraded while a subscriber keeps dead letters, naming how many', async () => {
    await using s = await startService({ ROLES: 'consumers', CONSUMERS: 'audit' }, nats().url);
    await publishRaw(nats().nc, s.stream, '{ not json', 'poison-1', { aggregateType: 'account', aggregateId: 'a-1' });
    const { http, body } = await readyWhen(s.app, (b) => b.subscribers?.[0]?.deadLetters === 1, 'the dead letter counted');
    expect(http).toBe(200);
    expect(body.status).toBe('degraded');
    expect(body.roles).toEqual(['consumers']);
    expect(body.reasons).toEqual(['subscriber audit: 1 dead letter']);
  });

  it('degraded when the relay has made no successful pass for longer than its threshold', async () => {
    await using t = await createTestDb();
    let now = Date.parse('2026-03-01T10:00:00.000Z');
    const lastPass = new Date(now);
    const check = createReadinessCheck(
      { db: t.deps.db, clock: () => new Date(now), log: silentLogger },
      { roles: ['relay'], relayStaleAfterMs: 60_000, relay: { state: () => 'connected', lastSuccessfulPassAt: () => lastPass, running: () => true } },
    );
    now += 30_000;
    expect(await check()).toMatchObject({ status: 'ready', reasons: [] });
    now += 31_000;
    expect(await check()).toMatchObject({
      status: 'degraded',
      reasons: ['relay: no successful pass for 61 s'],
      relay: { lastSuccessfulPassAt: lastPass.toISOString() },
    });
  });
});

describe('readiness - unavailable', () => {
  it('503 when the service database cannot be reached', async () => {
    using remote = appOverRemoteDatabase(`http://127.0.0.1:${await freePort()}`);
    const { http, body } = await ready(remote.app);
    expect(http).toBe(503);
    expect(body).toMatchObject({ status: 'unavailable', database: 'unavailable', reasons: ['database: the service database does not answer'] });
  });

  it('503 when the service database accepts the connection but never answers', async () => {
    const sockets = new Set<Socket>();
    const silent = createServer((socket) => void sockets.add(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as { port: number };
    try {
      using remote = appOverRemoteDatabase(`http://127.0.0.1:${port}`);
      const { http, body } = await ready(remote.app);
      expect(http).toBe(503);
      expect(body).toMatchObject({ status: 'unavailable', database: 'unavailable' });
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it('503 when a role of the process stopped for good: the relay refused an unsafe stream', async () => {
    // a duplicate window shorter than 10 × the relay's maximum back-off (200 ms in tests): the relay refuses to run
    const unsafe = await freshStream(nats().nc, 'UNSAFE', { duplicateWindowMs: 1000, maxBackoffMs: 100 });
    await using s = await createTestService({ ROLES: 'api,relay', NATS_URL: nats().url, ...streamEnv(unsafe) });
    await expect(s.service.background).rejects.toThrow(/Refusing to start/);
    const { http, body } = await ready(s.app);
    expect(http).toBe(503);
    expect(body).toMatchObject({ status: 'unavailable', database: 'ok', relay: { running: false }, reasons: ['relay: stopped'] });
    // its commands would wait in the outbox with nobody to publish them: out of rotation until the process is replaced
    expect((await postJson(s.app, '/accounts', { owner: 'ann' })).status).toBe(201);
  });
});
