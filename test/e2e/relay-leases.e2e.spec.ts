import { createClient, type Client } from '@libsql/client';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { registryOf } from '../../src/compose/define-modules.ts';
import { migrateDatabase } from '../../src/db/migrate.ts';
import { createDatabase, prepareLocalDatabase } from '../../src/db/open-database.ts';
import { createDeps } from '../../src/deps.ts';
import { DRIVER_BUSY_WAIT_MS, setBusyBudget } from '../../src/db/write-lock.ts';
import { DB_NOW_MS_SQL } from '../../src/leases/lease-store.ts';
import { silentLogger } from '../../src/logger.ts';
import { partitionOf } from '../../src/outbox/partition.ts';
import { accountCommands } from '../support/accounts.ts';
import { createTempDir, createTestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { FIXTURE_MIGRATIONS, fixtureModules } from '../support/fixture/modules.ts';
import { natsClient, startNats, type NatsServer } from '../support/nats.ts';
import { FIXTURE_ENTRY, freePort, runtimeCommand, spawnChild, withOutput, type ChildHandle } from '../support/process.ts';
import { republishCauses } from '../support/relay.ts';
import { pauseOutsideAWrite } from '../support/pause-outside-write.ts';

// Relays as real processes (the fixture's, ROLES=relay) sharing one outbox database: they split its partitions by
// leases kept in that database, take over a dead or paused relay's partitions once its leases run out, hand theirs
// over on a graceful stop, and refuse a partition count change while rows are pending. Leases are short here
// (RELAY_LEASE_TTL_MS), so every wait is a few renewals.

const TTL_MS = 1500;
const STREAM = 'HONO_OUTBOX';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

async function setup(ttlMs = TTL_MS) {
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
    RELAY_LEASE_TTL_MS: String(ttlMs),
  };
  return { nats, tmp, dbUrl, client, env };
}

/**
 * Migrates the database at `client` as a relay would, and returns the fixture's commands over it (run in this
 * process) through a client opened as a service opens one: a few ms of synchronous busy wait in the driver, the rest
 * of the busy budget waited asynchronously. A driver that waited seconds synchronously would block this process's
 * event loop while a relay it froze holds the lock, and with it the SIGCONT that would release the lock.
 */
async function migratedWithCommands({ client, dbUrl }: { client: Client; dbUrl: string }) {
  await prepareLocalDatabase(client);
  await migrateDatabase(client, FIXTURE_MIGRATIONS.service);
  const commandsClient = createClient({ url: dbUrl, timeout: DRIVER_BUSY_WAIT_MS });
  setBusyBudget(commandsClient, 10_000);
  cleanups.push(() => commandsClient.close());
  return accountCommands(createDeps(createDatabase(commandsClient), silentLogger, registryOf(fixtureModules)));
}

type Relay = ChildHandle & { name: string; metricsPort: number };

/** The fixture's relay process named `name` (INSTANCE_NAME), serving /metrics on a port of its own. */
async function startRelay(env: Record<string, string>, name: string, extra: Record<string, string> = {}): Promise<Relay> {
  const metricsPort = await freePort();
  const { cmd, args } = runtimeCommand('node', FIXTURE_ENTRY);
  const child = spawnChild(cmd, args, { ...env, ...extra, ROLES: 'relay', INSTANCE_NAME: name, METRICS_PORT: String(metricsPort) });
  cleanups.push(async () => {
    child.proc.kill('SIGCONT'); // a paused relay must not survive its test
    await child.kill9();
  });
  return { ...child, name, metricsPort };
}

/** A relay's /metrics; undefined while it does not answer (starting, paused). */
async function scrape(relay: Relay): Promise<string | undefined> {
  try {
    const res = await fetch(`http://127.0.0.1:${relay.metricsPort}/metrics`, { signal: AbortSignal.timeout(2000) });
    return res.ok ? await res.text() : undefined;
  } catch {
    return undefined;
  }
}

function sample(text: string | undefined, series: string): number | undefined {
  const line = text?.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

/** Live relay leases by instance name (the owner without the random suffix a process adds): how many partitions each holds now. */
async function liveLeases(client: Client): Promise<Record<string, number>> {
  const rs = await client.execute(
    `SELECT owner, count(*) AS n FROM leases WHERE scope = 'relay' AND owner IS NOT NULL AND expires_at > ${DB_NOW_MS_SQL} GROUP BY owner`,
  );
  return Object.fromEntries(rs.rows.map((r) => [instanceOf(String(r.owner)), Number(r.n)]));
}

const instanceOf = (owner: string) => owner.replace(/-[0-9a-f]{8}$/, '');

/** The partitions `name` holds a live lease of now. */
async function partitionsOf(client: Client, name: string): Promise<number[]> {
  const rs = await client.execute(`SELECT partition, owner FROM leases WHERE scope = 'relay' AND owner IS NOT NULL AND expires_at > ${DB_NOW_MS_SQL}`);
  return rs.rows
    .filter((r) => instanceOf(String(r.owner)) === name)
    .map((r) => Number(r.partition))
    .sort((x, y) => x - y);
}

const only = (leases: Record<string, number>, name: string, n: number) => Object.keys(leases).length === 1 && leases[name] === n;
const split = (leases: Record<string, number>, a: string, b: string) => Object.keys(leases).length === 2 && leases[a] === 8 && leases[b] === 8;

async function count(client: Client, where: string): Promise<number> {
  return Number((await client.execute(`SELECT count(*) FROM outbox WHERE ${where}`)).rows[0]![0]);
}

/** The Nats-Msg-Id of every message in the stream, read with one ordered consumer. */
async function streamIds(nats: NatsServer): Promise<string[]> {
  const nc = await natsClient(nats.url);
  try {
    const info = await (await jetstreamManager(nc)).streams.info(STREAM);
    const ids: string[] = [];
    if (info.state.messages === 0) return ids;
    const consumer = await jetstream(nc).consumers.get(STREAM);
    const messages = await consumer.consume();
    for await (const m of messages) {
      ids.push(m.headers?.get('Nats-Msg-Id') ?? '');
      if (m.seq >= info.state.last_seq) break;
    }
    await messages.close();
    return ids;
  } finally {
    await nc.close();
  }
}

/** Every outbox row sent, each id exactly once in the stream, none retried or parked. */
async function expectEachRowOnceInTheStream(client: Client, nats: NatsServer): Promise<number> {
  const rows = (await client.execute('SELECT id FROM outbox ORDER BY seq')).rows.map((r) => String(r.id));
  expect(await count(client, "status != 'sent'")).toBe(0);
  expect(await count(client, 'attempts > 0')).toBe(0);
  const ids = await streamIds(nats);
  expect(ids).toHaveLength(rows.length);
  expect(new Set(ids)).toEqual(new Set(rows));
  return rows.length;
}

/** A fixture database holding `rows` pending outbox rows (accounts opened), built through the commands and written to `path`. */
async function backlogFile(path: string, rows: number): Promise<void> {
  const seed = await createTestDb();
  try {
    const accounts = accountCommands(seed.deps);
    for (let done = 0; done < rows; done += 500) await accounts.openMany(Math.min(500, rows - done));
    await seed.client.execute({ sql: 'VACUUM INTO ?', args: [path] });
  } finally {
    seed.close();
  }
}

/** Commands from this process, `workers` at a time, until stopped; `stop` resolves with how many committed, or rejects with the first failure. */
function steadyCommands(accounts: Awaited<ReturnType<typeof migratedWithCommands>>, workers = 3, pauseMs = 5) {
  let running = true;
  let placed = 0;
  const done = Promise.all(
    Array.from({ length: workers }, async () => {
      while (running) {
        await accounts.open('steady');
        placed++;
        await sleep(pauseMs);
      }
    }),
  );
  done.catch(() => (running = false)); // surfaced by stop()
  cleanups.push(async () => {
    running = false;
    await done.catch(() => undefined);
  });
  return {
    placed: () => placed,
    stop: async () => {
      running = false;
      await done;
      return placed;
    },
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('relay leases - several relay processes on one outbox', () => {
  it('two relays split the 16 partitions 8 and 8 and drain a 20 000-row backlog between them, each row stored once and none published twice unless a lease moved or a publish failed', async () => {
    const N = 20_000;
    const { nats, tmp, client, env, dbUrl } = await setup();
    await migratedWithCommands({ client, dbUrl });
    const seed = join(tmp.dir, 'seed.db');
    const building = backlogFile(seed, N);
    const a = await startRelay(env, 'relay-a');
    const b = await startRelay(env, 'relay-b');
    await withOutput(
      b,
      eventually(async () => split(await liveLeases(client), 'relay-a', 'relay-b'), { timeoutMs: 20_000, what: '8 partitions each' }),
    );
    await building;
    const causesBefore = republishCauses(await scrape(a)) + republishCauses(await scrape(b));

    // the backlog appears at once, in one transaction, under two settled relays
    await client.execute({ sql: 'ATTACH ? AS seed', args: [seed] });
    await client.execute('INSERT INTO outbox SELECT * FROM seed.outbox');
    await client.execute('DETACH seed');
    const started = performance.now();
    await withOutput(
      a,
      eventually(async () => (await count(client, "status = 'sent'")) === N, { timeoutMs: 40_000, what: 'the backlog drained' }),
    );
    const drainMs = performance.now() - started;

    expect(split(await liveLeases(client), 'relay-a', 'relay-b')).toBe(true);
    const [ma, mb] = [await scrape(a), await scrape(b)];
    const published = [sample(ma, 'outbox_published_total')!, sample(mb, 'outbox_published_total')!];
    const duplicates = [sample(ma, 'outbox_duplicates_total')!, sample(mb, 'outbox_duplicates_total')!];
    console.log(
      `two relays drained ${N} rows in ${Math.round(drainMs)} ms: published ${published.join(' + ')}, duplicates ${duplicates.join(' + ')} (${((100 * (duplicates[0]! + duplicates[1]!)) / N).toFixed(2)} %)`,
    );
    // JetStream stores each id once: the two counts add up to the backlog, and each relay did its own half of it
    // a publish that timed out but was stored comes back as a duplicate, so only the sum with duplicates is exact
    expect(published[0]! + published[1]! + duplicates[0]! + duplicates[1]!).toBeGreaterThanOrEqual(N);
    expect(published[0]! + published[1]!).toBeLessThanOrEqual(N);
    expect(Math.min(...published)).toBeGreaterThan(N / 4);
    expect(sample(ma, 'outbox_relay_partitions_owned')).toBe(8);
    expect(sample(mb, 'outbox_relay_partitions_owned')).toBe(8);
    await expectEachRowOnceInTheStream(client, nats);
    // A row goes out twice only for a cause the relays count: a lease that moved (a relay stalled past its TTL), a
    // PubAck that timed out, a mark that failed. On a loaded machine those happen, and the broker drops the copies
    // (checked above); with none of them during the drain, no row may have been published twice.
    const causes = republishCauses(ma) + republishCauses(mb) - causesBefore;
    if (causes === 0) expect(duplicates[0]! + duplicates[1]!).toBe(0);
    else console.log(`${causes} lease move(s) or failed publish(es) during the drain: duplicates ${duplicates[0]! + duplicates[1]!}`);
    expect((await a.stop('SIGTERM')).code).toBe(0);
    expect((await b.stop('SIGTERM')).code).toBe(0);
  });

  it("a relay SIGKILLed: the survivor owns all 16 partitions within the TTL plus one pass, and publishes rows committed to the dead relay's partitions after the kill", async () => {
    const { nats, client, env, dbUrl } = await setup();
    const accounts = await migratedWithCommands({ client, dbUrl });
    const a = await startRelay(env, 'relay-a');
    const b = await startRelay(env, 'relay-b');
    await withOutput(
      b,
      eventually(async () => split(await liveLeases(client), 'relay-a', 'relay-b'), { timeoutMs: 20_000, what: '8 partitions each' }),
    );
    const load = steadyCommands(accounts);
    await sleep(300);
    const deadPartitions = await partitionsOf(client, 'relay-b');
    expect(deadPartitions).toHaveLength(8);

    await b.kill9();
    const killedAt = performance.now();
    const afterKill = accounts.openMany(300); // rows for both relays' partitions, committed while b's leases still run
    await withOutput(
      a,
      eventually(async () => only(await liveLeases(client), 'relay-a', 16), { timeoutMs: 10_000, everyMs: 10, what: 'relay-a owning 16' }),
    );
    const takeoverMs = performance.now() - killedAt;
    console.log(`relay-a owned all 16 partitions ${Math.round(takeoverMs)} ms after relay-b's SIGKILL (TTL ${TTL_MS} ms)`);
    expect(takeoverMs).toBeLessThan(TTL_MS + 1500);

    const opened = await afterKill;
    await load.stop();
    const orphans = (
      await client.execute({ sql: 'SELECT partition FROM outbox WHERE aggregate_id IN (SELECT value FROM json_each(?))', args: [JSON.stringify(opened)] })
    ).rows.filter((r) => deadPartitions.includes(Number(r.partition)));
    expect(orphans.length).toBeGreaterThan(50);
    const total = await count(client, '1 = 1');
    await withOutput(
      a,
      eventually(async () => (await count(client, "status = 'sent'")) === total, { timeoutMs: 20_000, what: 'every row sent' }),
    );
    await expectEachRowOnceInTheStream(client, nats);
    expect(sample(await scrape(a), 'outbox_relay_partitions_owned')).toBe(16);
    expect((await a.stop('SIGTERM')).code).toBe(0);
  });

  it('a relay paused past its TTL loses its partitions to the other, finds out when it resumes, and the stream still holds every row exactly once', async () => {
    const { nats, client, env, dbUrl } = await setup();
    const accounts = await migratedWithCommands({ client, dbUrl });
    const a = await startRelay(env, 'relay-a');
    const b = await startRelay(env, 'relay-b');
    await withOutput(
      b,
      eventually(async () => split(await liveLeases(client), 'relay-a', 'relay-b'), { timeoutMs: 20_000, what: '8 partitions each' }),
    );
    const load = steadyCommands(accounts, 4, 2);
    await sleep(500);

    await pauseOutsideAWrite(b, dbUrl);
    const pausedAt = performance.now();
    await withOutput(
      a,
      eventually(async () => only(await liveLeases(client), 'relay-a', 16), { timeoutMs: 10_000, everyMs: 10, what: 'relay-a owning 16' }),
    );
    console.log(`relay-a owned all 16 partitions ${Math.round(performance.now() - pausedAt)} ms after relay-b was paused`);
    await sleep(Math.max(0, pausedAt + TTL_MS + 1000 - performance.now()));
    b.proc.kill('SIGCONT');

    const losses = await withOutput(
      b,
      eventually(async () => sample(await scrape(b), 'outbox_relay_lease_losses_total'), { timeoutMs: 10_000, what: 'relay-b counting its lost leases' }),
    );
    expect(losses).toBeGreaterThan(0);
    // log lines go out once per event-loop turn (src/entry/stdout-lines.ts), so the line may trail the counter a little
    await eventually(async () => b.stdout().includes('leases: lost partitions'), { timeoutMs: 5000, what: "relay-b's log line about its lost partitions" });
    expect(b.stdout()).toContain('leases: lost partitions');
    // it rejoins: the partitions are split again
    await withOutput(
      b,
      eventually(async () => split(await liveLeases(client), 'relay-a', 'relay-b'), { timeoutMs: 15_000, what: '8 partitions each again' }),
    );
    await sleep(300);
    const placed = await load.stop();
    expect(placed).toBeGreaterThan(100);

    const total = await count(client, '1 = 1');
    await withOutput(
      b,
      eventually(async () => (await count(client, "status = 'sent'")) === total, { timeoutMs: 20_000, what: 'every row sent' }),
    );
    await expectEachRowOnceInTheStream(client, nats);
    const fenced = b.stdout().includes('were left to its new owner');
    console.log(`paused relay: ${losses} leases lost, ${total} rows, its marks ${fenced ? 'were' : 'were not'} fenced off after it resumed`);
    expect((await a.stop('SIGTERM')).code).toBe(0);
    expect((await b.stop('SIGTERM')).code).toBe(0);
  });

  it('a second relay gets half the partitions within a few renewals, and hands them back on SIGTERM well before its leases would have run out', async () => {
    const ttl = 2400;
    const { client, env, dbUrl } = await setup(ttl);
    await migratedWithCommands({ client, dbUrl });
    const a = await startRelay(env, 'relay-a');
    await withOutput(
      a,
      eventually(async () => only(await liveLeases(client), 'relay-a', 16), { timeoutMs: 20_000, what: 'relay-a owning 16' }),
    );

    const b = await startRelay(env, 'relay-b');
    await withOutput(
      b,
      eventually(async () => Number((await client.execute("SELECT count(*) FROM lease_members WHERE owner LIKE 'relay-b-%'")).rows[0]![0]) === 1, {
        timeoutMs: 20_000,
        everyMs: 10,
        what: 'relay-b joining',
      }),
    );
    const joinedAt = performance.now();
    await withOutput(
      b,
      eventually(async () => split(await liveLeases(client), 'relay-a', 'relay-b'), { timeoutMs: 10_000, everyMs: 10, what: '8 partitions each' }),
    );
    const rebalanceMs = performance.now() - joinedAt;
    console.log(`rebalanced to 8 + 8 in ${Math.round(rebalanceMs)} ms after relay-b joined (renewal every ${ttl / 3} ms)`);
    expect(rebalanceMs).toBeLessThan((5 * ttl) / 3);

    await sleep(ttl / 3); // b has renewed: its leases run a whole TTL from here
    const bExpiry = Number((await client.execute("SELECT max(expires_at) FROM leases WHERE scope = 'relay' AND owner LIKE 'relay-b-%'")).rows[0]![0]);
    const stopping = b.stop('SIGTERM');
    const stoppedAt = performance.now();
    const dbNow = await withOutput(
      a,
      eventually(
        async () => {
          if (!only(await liveLeases(client), 'relay-a', 16)) return undefined;
          return Number((await client.execute(`SELECT ${DB_NOW_MS_SQL}`)).rows[0]![0]);
        },
        { timeoutMs: 10_000, everyMs: 10, what: 'relay-a owning 16 again' },
      ),
    );
    const handOverMs = performance.now() - stoppedAt;
    console.log(
      `relay-a owned 16 again ${Math.round(handOverMs)} ms after SIGTERM to relay-b, ${bExpiry - dbNow} ms before relay-b's leases would have run out`,
    );
    // b released its leases and left: a took them at its next renewal, not once they ran out
    expect(handOverMs).toBeLessThan((3 * ttl) / 4);
    expect(bExpiry - dbNow).toBeGreaterThan(0);
    expect((await stopping).code).toBe(0);
    expect(b.stdout()).not.toContain('could not release');
    expect(Number((await client.execute("SELECT count(*) FROM lease_members WHERE owner LIKE 'relay-b-%'")).rows[0]![0])).toBe(0);
    expect((await a.stop('SIGTERM')).code).toBe(0);
  });

  it('refuses to start with OUTBOX_PARTITIONS=32 while rows are pending: exit 2, one line naming OUTBOX_PARTITIONS, nothing changed', async () => {
    const { client, env, dbUrl } = await setup();
    await backlogFile(dbUrl.slice('file:'.length), 200);
    const spread = async () =>
      (await client.execute('SELECT partition, count(*) FROM outbox GROUP BY partition ORDER BY partition')).rows.map((r) => [Number(r[0]), Number(r[1])]);
    const before = await spread();

    const refused = await startRelay(env, 'relay-32', { OUTBOX_PARTITIONS: '32' });
    const exit = await refused.exited;
    expect(exit.code, refused.output()).toBe(2);
    const lines = refused.stderr().trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('OUTBOX_PARTITIONS');
    expect(Number((await client.execute('SELECT count FROM outbox_partitions')).rows[0]![0])).toBe(16);
    expect(await spread()).toEqual(before);
    expect(await count(client, "status = 'pending'")).toBe(200);
    expect(Number((await client.execute('SELECT count(*) FROM leases WHERE owner IS NOT NULL')).rows[0]![0])).toBe(0);
  });

  it('applies OUTBOX_PARTITIONS=32 once nothing is pending: new rows land in partitions 0..31 and are published', async () => {
    const { nats, client, env, dbUrl } = await setup();
    await backlogFile(dbUrl.slice('file:'.length), 200);
    // drained at 16 partitions, then started at 32
    const at16 = await startRelay(env, 'relay-16');
    await withOutput(
      at16,
      eventually(async () => (await count(client, "status = 'sent'")) === 200, { timeoutMs: 20_000, what: 'the backlog drained' }),
    );
    expect((await at16.stop('SIGTERM')).code).toBe(0);
    const at32 = await startRelay(env, 'relay-32', { OUTBOX_PARTITIONS: '32' });
    await withOutput(
      at32,
      eventually(async () => only(await liveLeases(client), 'relay-32', 32), { timeoutMs: 20_000, what: 'relay-32 owning 32 partitions' }),
    );
    expect(Number((await client.execute('SELECT count FROM outbox_partitions')).rows[0]![0])).toBe(32);

    const accounts = accountCommands(createDeps(createDatabase(client), silentLogger, registryOf(fixtureModules)));
    const opened = await accounts.openMany(300);
    const rows = (
      await client.execute({
        sql: 'SELECT aggregate_type, aggregate_id, partition FROM outbox WHERE aggregate_id IN (SELECT value FROM json_each(?))',
        args: [JSON.stringify(opened)],
      })
    ).rows;
    expect(rows).toHaveLength(300);
    for (const r of rows) expect(Number(r.partition)).toBe(partitionOf(String(r.aggregate_type), String(r.aggregate_id), 32));
    expect(new Set(rows.map((r) => Number(r.partition))).size).toBeGreaterThan(16);
    await withOutput(
      at32,
      eventually(async () => (await count(client, "status = 'sent'")) === 500, { timeoutMs: 20_000, what: 'the new rows sent' }),
    );
    await expectEachRowOnceInTheStream(client, nats);
    expect((await at32.stop('SIGTERM')).code).toBe(0);
  });
});
