// The subscriber and relay processes on SIGTERM while their nats-server is frozen (SIGSTOP): they are meant to exit
// within seconds, not after the client notices the stale connection (two missed pings, 20-30 s) or a request timeout.
import { createClient, type Client } from '@libsql/client';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { creditedEvent } from '../support/accounts.ts';
import { createTempDir } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { postJson } from '../support/http.ts';
import { natsClient, startNats, type NatsServer } from '../support/nats.ts';
import { FIXTURE_ENTRY, overHttp, runtimeCommand, spawnChild, spawnService, waitForHttp, withOutput, type ChildHandle } from '../support/process.ts';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { createStream, ownStream, publishEvents, streamEnv } from '../support/stream.ts';

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

type Setup = {
  nats: NatsServer;
  env: Record<string, string> & { DATABASE_URL: string; CONSUMER_DATABASE_URL_TEMPLATE: string };
  stream: StreamSettings;
  balances: () => Client;
};

async function setup(tag: string): Promise<Setup> {
  const nats = await startNats();
  const tmp = createTempDir();
  cleanups.push(
    () => tmp[Symbol.dispose](),
    () => nats[Symbol.asyncDispose](),
  );
  const stream = ownStream(tag);
  const nc = await natsClient(nats.url);
  await createStream(nc, stream);
  await nc.close();
  const env = {
    DATABASE_URL: `file:${join(tmp.dir, 'app.db')}`,
    CONSUMER_DATABASE_URL_TEMPLATE: `file:${join(tmp.dir, '{name}.db')}`,
    NATS_URL: nats.url,
    LOG_LEVEL: 'info',
    RELAY_POLL_MS: '20',
    RELAY_BACKOFF_BASE_MS: '100',
    RELAY_MAX_BACKOFF_MS: '1000',
    ...streamEnv(stream),
  };
  let client: Client | undefined;
  const balances = () => {
    if (!client) {
      client = createClient({ url: env.CONSUMER_DATABASE_URL_TEMPLATE.replace('{name}', 'balances') });
      const c = client;
      cleanups.push(() => c.close());
    }
    return client;
  };
  return { nats, env, stream, balances };
}

function consumer(env: Record<string, string>, extra: Record<string, string> = {}): ChildHandle {
  const { cmd, args } = runtimeCommand('node', FIXTURE_ENTRY);
  const child = spawnChild(cmd, args, { ...env, ROLES: 'consumers', CONSUMERS: 'balances', ...extra });
  cleanups.push(() => child.kill9());
  return child;
}

async function creditedTo(balances: Client, owner: string): Promise<number> {
  try {
    const rows = (await balances.execute({ sql: 'SELECT credited_cents FROM owner_balances WHERE owner = ?', args: [owner] })).rows;
    return Number(rows[0]?.[0] ?? 0);
  } catch {
    return 0; // not migrated yet
  }
}

/** SIGTERMs `child` and resolves with the ms it took to exit and its exit. */
async function timedStop(child: ChildHandle): Promise<{ ms: number; code: number | null; signal: string | null }> {
  const from = performance.now();
  const exit = await child.stop('SIGTERM', 45_000);
  return { ms: performance.now() - from, code: exit.code, signal: exit.signal };
}

/** The process exited 0 within 10 s of its SIGTERM (its output in the message otherwise). */
function expectQuickCleanExit(stopped: { ms: number; code: number | null }, child: { output(): string }): void {
  expect({ code: stopped.code, fast: stopped.ms < 10_000 }, `stopped after ${Math.round(stopped.ms)} ms; output:\n${child.output().slice(-3000)}`).toEqual({
    code: 0,
    fast: true,
  });
}

describe('processes - SIGTERM while the broker is frozen', () => {
  for (const [mode, extra] of [
    ['single', {}],
    ['partitioned', { CONSUMER_PARTITIONED: 'true' }],
  ] as const) {
    it(`the ${mode} subscriber process exits within seconds of SIGTERM when its broker froze while it consumed`, async () => {
      const s = await setup(mode === 'single' ? 'PCS' : 'PCP');
      const nc = await natsClient(s.nats.url);
      await publishEvents(nc, s.stream, [creditedEvent({ owner: 'frozen-owner', amountCents: 10 })]);
      await nc.close();
      const child = consumer(s.env, extra);
      await withOutput(
        child,
        eventually(async () => (await creditedTo(s.balances(), 'frozen-owner')) === 10, { what: 'the event applied', timeoutMs: 30_000 }),
      );
      await s.nats.pause();
      await new Promise((r) => setTimeout(r, 1000));
      const stopped = await timedStop(child);
      s.nats.resume();
      expectQuickCleanExit(stopped, child);
      expect(await creditedTo(s.balances(), 'frozen-owner')).toBe(10);
    }, 90_000);
  }

  it('the subscriber process exits within seconds of SIGTERM when its broker was frozen before it first reached it', async () => {
    const s = await setup('PCF');
    await s.nats.pause();
    const child = consumer(s.env);
    // it holds its lease: it is readying its durable on the frozen broker
    await withOutput(
      child,
      eventually(
        async () => {
          try {
            return Number((await s.balances().execute('SELECT count(*) FROM leases WHERE owner IS NOT NULL')).rows[0]![0]) > 0;
          } catch {
            return false;
          }
        },
        { what: 'the lease held', timeoutMs: 30_000 },
      ),
    );
    await new Promise((r) => setTimeout(r, 1000));
    const stopped = await timedStop(child);
    s.nats.resume();
    expectQuickCleanExit(stopped, child);
  }, 90_000);

  it('the relay process exits within seconds of SIGTERM when its broker froze while it published, and every row is stored once', async () => {
    const s = await setup('PRS');
    const api = await spawnService('node', FIXTURE_ENTRY, { ...s.env, ROLES: 'api' });
    cleanups.push(() => api.kill9());
    await waitForHttp(`${api.url}/health`, { child: api });
    const { cmd, args } = runtimeCommand('node', FIXTURE_ENTRY);
    const relay = spawnChild(cmd, args, { ...s.env, ROLES: 'relay', RELAY_PUBLISH_TIMEOUT_MS: '30000' });
    cleanups.push(() => relay.kill9());
    const http = overHttp(api.url);
    const open = async () => expect((await postJson(http, '/accounts', { owner: 'relay-owner' })).status).toBe(201);
    await open();
    const nc = await natsClient(s.nats.url);
    const stored = async () => {
      const { jetstreamManager } = await import('@nats-io/jetstream');
      return (await (await jetstreamManager(nc)).streams.info(s.stream.name)).state.messages;
    };
    await withOutput(
      relay,
      eventually(async () => (await stored()) === 1, { what: 'the first row published', timeoutMs: 30_000 }),
    );
    await s.nats.pause();
    for (let i = 0; i < 20; i++) await open();
    await new Promise((r) => setTimeout(r, 1000));
    const stopped = await timedStop(relay);
    s.nats.resume();
    expect({ code: stopped.code, fast: stopped.ms < 10_000 }, `stopped after ${Math.round(stopped.ms)} ms; output:\n${relay.output().slice(-3000)}`).toEqual({
      code: 0,
      fast: true,
    });
    const next = spawnChild(cmd, args, { ...s.env, ROLES: 'relay' });
    cleanups.push(() => next.kill9());
    const app = createClient({ url: s.env.DATABASE_URL });
    cleanups.push(() => app.close());
    await withOutput(
      next,
      eventually(async () => Number((await app.execute("SELECT count(*) FROM outbox WHERE status = 'sent'")).rows[0]![0]) === 21, {
        what: 'every row sent',
        timeoutMs: 30_000,
      }),
    );
    expect(await stored()).toBe(21);
    expect(Number((await app.execute('SELECT count(*) FROM outbox WHERE attempts > 0')).rows[0]![0])).toBe(0);
    await nc.close();
    await next.stop();
  }, 120_000);
});
