import { createClient, type Client } from '@libsql/client';
import { jetstreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { registryOf } from '../../src/compose/define-modules.ts';
import { migrateDatabase } from '../../src/db/migrate.ts';
import { createDatabase } from '../../src/db/open-database.ts';
import { createDeps } from '../../src/deps.ts';
import { silentLogger } from '../../src/logger.ts';
import { accountCommands } from '../support/accounts.ts';
import { createTempDir, createTestDb, MARKED_SENT } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { FIXTURE_MIGRATIONS, fixtureModules } from '../support/fixture/modules.ts';
import { postJson } from '../support/http.ts';
import { natsClient, startNats, type NatsServer } from '../support/nats.ts';
import {
  FAULT_ENTRY,
  FIXTURE_ENTRY,
  freePort,
  overHttp,
  runtimeCommand,
  spawnChild,
  spawnService,
  waitForHttp,
  withOutput,
  type ChildHandle,
} from '../support/process.ts';
import { readStream } from '../support/stream.ts';

// The relay of the fixture service (test/support/fixture: accounts opened, credited and closed) as a real process,
// started as the service starts it (ROLES=relay), so these tests keep running when the example is deleted.

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

async function setup() {
  const nats = await startNats();
  const tmp = createTempDir();
  const dbUrl = `file:${join(tmp.dir, 'app.db')}`;
  const client = createClient({ url: dbUrl, timeout: 5000 });
  cleanups.push(async () => {
    client.close();
    await nats[Symbol.asyncDispose]();
    tmp[Symbol.dispose]();
  });
  const env = {
    DATABASE_URL: dbUrl,
    NATS_URL: nats.url,
    LOG_LEVEL: 'warn',
    RELAY_POLL_MS: '20',
    RELAY_BACKOFF_BASE_MS: '50',
    RELAY_MAX_BACKOFF_MS: '500',
    RELAY_PUBLISH_TIMEOUT_MS: '1000',
  };
  return { nats, tmp, dbUrl, client, env };
}

/** The fixture's relay process, or with `fault` (HONO_OUTBOX_TEST_FAULT) the fault entry's: crash hooks live in test code only. */
function startRelay(env: Record<string, string>, fault?: string): ChildHandle {
  const { cmd, args } = runtimeCommand('node', fault ? FAULT_ENTRY : FIXTURE_ENTRY);
  const child = spawnChild(cmd, fault ? [...args, '--fixture', 'relay'] : args, fault ? { ...env, HONO_OUTBOX_TEST_FAULT: fault } : { ...env, ROLES: 'relay' });
  cleanups.push(() => void child.kill9());
  return child;
}

async function count(client: Client, where: string): Promise<number> {
  return Number((await client.execute(`SELECT count(*) FROM outbox WHERE ${where}`)).rows[0]![0]);
}

async function streamIds(nats: NatsServer): Promise<string[]> {
  const nc = await natsClient(nats.url);
  try {
    return (await readStream(nc, 'HONO_OUTBOX')).map((m) => m.headers['Nats-Msg-Id']!);
  } finally {
    await nc.close();
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The fixture's API process (ROLES=api), answering /health. */
async function startApi(env: Record<string, string>) {
  const api = await spawnService('node', FIXTURE_ENTRY, { ...env, ROLES: 'api' });
  cleanups.push(() => void api.kill9());
  await waitForHttp(`${api.url}/health`, { child: api });
  return api;
}

describe('relay process - crashes and stops', () => {
  it('a relay SIGKILLed mid-run under a stream of commands, then restarted, leaves every committed event in the stream exactly once', async () => {
    const { nats, client, env } = await setup();
    const api = await startApi(env);

    let placing = true;
    let placed = 0;
    const load = (async () => {
      const workers = Array.from({ length: 6 }, async () => {
        while (placing) {
          const res = await postJson(overHttp(api.url), '/accounts', { owner: 'crash' });
          expect(res.status).toBe(201);
          placed++;
        }
      });
      await Promise.all(workers);
    })();

    // a kill exactly between PubAck and mark-sent, then kills at arbitrary moments
    let relay = startRelay(env, 'kill-after-puback:10');
    const first = await relay.exited;
    expect(first.signal).toBe('SIGKILL');
    for (const delay of [150, 400, 90, 700]) {
      relay = startRelay(env);
      await sleep(delay);
      await relay.kill9();
    }
    placing = false;
    await load;
    relay = startRelay(env);
    const total = await count(client, '1 = 1');
    expect(placed).toBeGreaterThan(0);
    expect(total).toBe(placed);
    await eventually(async () => (await count(client, "status = 'sent'")) === total, { timeoutMs: 30_000, what: 'every row sent' });
    await relay.stop('SIGTERM');

    const ids = await streamIds(nats);
    const rows = (await client.execute('SELECT id FROM outbox ORDER BY seq')).rows.map((r) => String(r.id));
    expect(ids).toHaveLength(rows.length);
    expect(new Set(ids)).toEqual(new Set(rows));
  });

  it('SIGTERM during a large backlog exits 0 with every acknowledged row marked sent', async () => {
    const { nats, client, env, dbUrl } = await setup();
    await withBacklog(dbUrl, 10_000);
    const total = await count(client, '1 = 1');
    expect(total).toBe(10_000);

    const relay = startRelay({ ...env, RELAY_BATCH: '200', RELAY_MAX_IN_FLIGHT: '16' });
    await eventually(async () => (await count(client, MARKED_SENT)) > 0, { timeoutMs: 20_000, what: 'a first row sent' });
    const exit = await relay.stop('SIGTERM');
    expect(exit.code).toBe(0);

    // marks recorded apart while it drained count: it stopped before folding them in
    const sent = (await client.execute(`SELECT id FROM outbox WHERE ${MARKED_SENT}`)).rows.map((r) => String(r.id));
    const ids = await streamIds(nats);
    expect(sent.length).toBeLessThan(total); // it stopped mid-backlog
    expect(new Set(ids)).toEqual(new Set(sent));
  });

  it('refuses to start against a stream whose duplicate window is shorter than 10 × the maximum back-off', async () => {
    const { nats, env } = await setup();
    const nc = await natsClient(nats.url);
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: 'HONO_OUTBOX', subjects: ['hono-outbox.>'], duplicate_window: nanos(60_000) });
    await nc.close();
    const relay = startRelay({ ...env, RELAY_MAX_BACKOFF_MS: '30000' });
    const exit = await relay.exited;
    expect(exit.code).toBe(2);
    expect(relay.stderr()).toContain(
      "Refusing to start: stream HONO_OUTBOX has a duplicate window of 60000 ms, shorter than 10 × the relay's maximum back-off (300000 ms)",
    );
  });

  it('a commit in the API process wakes a relay process through the kick subject, long before its poll interval', async () => {
    const { nats, env } = await setup();
    const metricsPort = await freePort();
    const relay = startRelay({ ...env, RELAY_POLL_MS: '60000', METRICS_PORT: String(metricsPort) });
    await withOutput(
      relay,
      eventually(
        async () => {
          const res = await fetch(`http://127.0.0.1:${metricsPort}/ready`).catch(() => undefined);
          return res ? ((await res.json()) as { relay?: { broker: string } }).relay?.broker === 'connected' : false;
        },
        { timeoutMs: 20_000, what: 'the relay connected' },
      ),
    );
    const api = await startApi(env);
    await sleep(500); // the API's kicker connects in the background
    const res = await postJson(overHttp(api.url), '/accounts', { owner: 'kick' });
    expect(res.status).toBe(201);
    // bounded well below the 60 s poll: only a kick can deliver it in time
    await eventually(async () => (await streamIds(nats)).length === 1, { timeoutMs: 15_000, what: 'the event on the stream' });
    await relay.stop('SIGTERM');
  });
});

/** Puts at `dbUrl` a fixture database holding `rows` pending outbox rows (accounts opened), built elsewhere and copied in (fast, one file). */
async function withBacklog(dbUrl: string, rows: number): Promise<void> {
  const seed = await createTestDb();
  try {
    const accounts = accountCommands(seed.deps);
    for (let done = 0; done < rows; done += 500) await accounts.openMany(Math.min(500, rows - done));
    await seed.client.execute({ sql: 'VACUUM INTO ?', args: [dbUrl.slice('file:'.length)] });
  } finally {
    seed.close();
  }
}

describe('relay process - edges', () => {
  // a 10,000-row drain with database back-offs in it: well within a minute on an idle machine, not beside the whole suite
  it('keeps running when another process holds the database past the busy timeout during a backlog, and drains it once released', {
    timeout: 120_000,
  }, async () => {
    const { nats, client, env, dbUrl } = await setup();
    await withBacklog(dbUrl, 10_000);
    const relay = startRelay({ ...env, RELAY_BATCH: '200', DATABASE_BUSY_TIMEOUT_MS: '200' });
    await withOutput(
      relay,
      eventually(async () => (await count(client, "status = 'sent'")) > 0, { timeoutMs: 20_000, what: 'a first row sent' }),
    );

    const locker = createClient({ url: dbUrl, timeout: 5000 });
    cleanups.push(() => locker.close());
    const lock = await locker.transaction('write');
    await lock.execute("UPDATE outbox SET headers = headers WHERE id = 'none'");
    await sleep(3000); // many mark-sent writes wait out the busy timeout meanwhile
    expect(relay.proc.exitCode, relay.output()).toBeNull();
    await lock.rollback();
    lock.close();

    await withOutput(
      relay,
      eventually(async () => (await count(client, "status = 'sent'")) === 10_000, { timeoutMs: 60_000, what: 'the backlog drained' }),
    );
    expect(relay.proc.exitCode, relay.output()).toBeNull();
    const ids = await streamIds(nats);
    expect(ids).toHaveLength(10_000);
    expect((await relay.stop('SIGTERM')).code).toBe(0);
  });

  it('re-creates a stream an operator deleted and publishes what is pending, without a restart or any other process', async () => {
    const { nats, client, env } = await setup();
    await migrateDatabase(client, FIXTURE_MIGRATIONS.service);
    const accounts = accountCommands(createDeps(createDatabase(client), silentLogger, registryOf(fixtureModules)));
    const relay = startRelay(env);
    await accounts.open();
    await withOutput(
      relay,
      eventually(async () => (await count(client, "status = 'sent'")) === 1, { timeoutMs: 20_000, what: 'the first event sent' }),
    );

    const nc = await natsClient(nats.url);
    try {
      await (await jetstreamManager(nc)).streams.delete('HONO_OUTBOX');
    } finally {
      await nc.close();
    }
    await accounts.open();
    await withOutput(
      relay,
      eventually(async () => (await count(client, "status = 'sent'")) === 2, { timeoutMs: 20_000, what: 'the second event sent to a re-created stream' }),
    );
    const second = (await client.execute('SELECT id FROM outbox ORDER BY seq DESC LIMIT 1')).rows[0]![0];
    expect(await streamIds(nats)).toEqual([second]);
    expect((await relay.stop('SIGTERM')).code).toBe(0);
  });
});
