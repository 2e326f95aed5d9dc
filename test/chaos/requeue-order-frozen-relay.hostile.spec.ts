import { createClient } from '@libsql/client';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { registryOf } from '../../src/compose/define-modules.ts';
import { migrateDatabase } from '../../src/db/migrate.ts';
import { createDatabase, prepareLocalDatabase } from '../../src/db/open-database.ts';
import { DRIVER_BUSY_WAIT_MS, setBusyBudget } from '../../src/db/write-lock.ts';
import { createDeps } from '../../src/deps.ts';
import { DB_NOW_MS_SQL } from '../../src/leases/lease-store.ts';
import { silentLogger } from '../../src/logger.ts';
import { requeueFailed } from '../../src/outbox/failed-rows.ts';
import { accountCommands, expectResponse } from '../support/accounts.ts';
import { createTempDir } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { FIXTURE_MIGRATIONS, fixtureModules } from '../support/fixture/modules.ts';
import { natsClient, startNats } from '../support/nats.ts';
import { FIXTURE_ENTRY, freePort, runtimeCommand, spawnChild, withOutput, type ChildHandle } from '../support/process.ts';
import { createStream, ownStream, readStream, streamEnv } from '../support/stream.ts';
import { pauseOutsideAWrite } from '../support/pause-outside-write.ts';

// Operators' paths under several real relay processes: parked rows in the middle of a backlog larger than
// RELAY_BATCH, re-queued out of their write order, one re-queue while the relay owning the aggregate is frozen
// (SIGSTOP) past its lease, and a partition-count change between restarts with a parked row left over. The stream
// must hold every row once, each aggregate's first copies in outbox seq order.

const TTL_MS = 1500;
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Relay = ChildHandle & { name: string };

describe('relay - operator re-queues under several relay processes', () => {
  it('re-queued parked rows (out of order, during a freeze past the lease, across a partition-count change) reach the stream once each, in per-aggregate seq order', {
    timeout: 120_000,
  }, async () => {
    const nats = await startNats();
    const tmp = createTempDir();
    const dbUrl = `file:${join(tmp.dir, 'app.db')}`;
    const client = createClient({ url: dbUrl, timeout: 5000 });
    const nc = await natsClient(nats.url);
    cleanups.push(async () => {
      await nc.close();
      client.close();
      await nats[Symbol.asyncDispose]();
      tmp[Symbol.dispose]();
    });
    // the operator made the stream with a small maximum message size: a large event is a genuine poison row
    const stream = ownStream('RQ', { maxMsgSize: 4096, maxBackoffMs: 500 });
    await createStream(nc, stream);
    await prepareLocalDatabase(client);
    await migrateDatabase(client, FIXTURE_MIGRATIONS.service);
    const cmdClient = createClient({ url: dbUrl, timeout: DRIVER_BUSY_WAIT_MS });
    setBusyBudget(cmdClient, 10_000);
    cleanups.push(() => cmdClient.close());
    const deps = createDeps(createDatabase(cmdClient), silentLogger, registryOf(fixtureModules));
    const accounts = accountCommands(deps);

    const env = {
      DATABASE_URL: dbUrl,
      NATS_URL: nats.url,
      ...streamEnv(stream),
      LOG_LEVEL: 'warn',
      RELAY_POLL_MS: '20',
      RELAY_BATCH: '40',
      RELAY_MAX_ATTEMPTS: '2',
      RELAY_BACKOFF_BASE_MS: '20',
      RELAY_MAX_BACKOFF_MS: '100',
      RELAY_PUBLISH_TIMEOUT_MS: '2000',
      RELAY_LEASE_TTL_MS: String(TTL_MS),
      STREAM_DUPLICATE_WINDOW_MS: String(10 * 60 * 1000),
    };
    const startRelay = async (name: string, extra: Record<string, string> = {}): Promise<Relay> => {
      const { cmd, args } = runtimeCommand('node', FIXTURE_ENTRY);
      const child = spawnChild(cmd, args, { ...env, ...extra, ROLES: 'relay', INSTANCE_NAME: name, METRICS_PORT: String(await freePort()) });
      cleanups.push(async () => {
        child.proc.kill('SIGCONT');
        await child.kill9();
      });
      return { ...child, name };
    };
    const poison = async (seq: number) =>
      client.execute({ sql: `UPDATE outbox SET payload = json_set(payload, '$.data.owner', ?) WHERE seq = ?`, args: ['p'.repeat(6000), seq] });
    const cure = async (seq: number) =>
      client.execute({ sql: `UPDATE outbox SET payload = json_set(payload, '$.data.owner', 'ann') WHERE seq = ?`, args: [seq] });
    const rowsOf = async (agg: string) =>
      (await client.execute({ sql: 'SELECT seq, id, status FROM outbox WHERE aggregate_id = ? ORDER BY seq', args: [agg] })).rows.map((r) => ({
        seq: Number(r.seq),
        id: String(r.id),
        status: String(r.status),
      }));
    const statusCount = async (status: string) =>
      Number((await client.execute({ sql: 'SELECT count(*) FROM outbox WHERE status = ?', args: [status] })).rows[0]![0]);

    // victim: opened, 4 deposits, each later event written behind 40-row slices of other accounts' backlog
    const victim = await accounts.open('ann');
    for (let i = 0; i < 4; i++) {
      await accounts.openMany(60);
      expectResponse(await accounts.deposit(victim, 10 + i));
    }
    await accounts.openMany(60);
    const v = await rowsOf(victim);
    expect(v).toHaveLength(5);
    // the 2nd, 3rd and 5th events of the victim are poison
    await poison(v[1]!.seq);
    await poison(v[2]!.seq);
    await poison(v[4]!.seq);

    let a = await startRelay('relay-a');
    let b = await startRelay('relay-b');
    await withOutput(
      a,
      eventually(async () => (await rowsOf(victim))[1]!.status === 'failed', { timeoutMs: 30_000, what: 'the first poison parked' }),
    );
    await eventually(async () => (await statusCount('pending')) === 3, { timeoutMs: 30_000, what: 'only the victim held' });

    // an operator parks the 4th event by hand too (it is held anyway), then cures 2nd and re-queues 4th first, then 3rd (still poison)
    await client.execute({ sql: "UPDATE outbox SET status = 'failed' WHERE seq = ?", args: [v[3]!.seq] });
    expect(await deps.writer.write((tx) => requeueFailed(tx, v[3]!.id))).toBe(1);
    await sleep(300);
    expect((await rowsOf(victim)).map((r) => r.status)).toEqual(['sent', 'failed', 'pending', 'pending', 'pending']);

    // freeze the relay owning the victim's partition past its lease, then cure and re-queue everything
    const part = Number((await client.execute({ sql: 'SELECT partition FROM outbox WHERE seq = ?', args: [v[1]!.seq] })).rows[0]![0]);
    const owner = String(
      (await client.execute({ sql: `SELECT owner FROM leases WHERE scope = 'relay' AND partition = ? AND expires_at > ${DB_NOW_MS_SQL}`, args: [part] }))
        .rows[0]![0],
    );
    const frozen = owner.startsWith('relay-a') ? a : b;
    await pauseOutsideAWrite(frozen, dbUrl);
    await accounts.openMany(200); // a backlog for both relays' partitions
    await cure(v[1]!.seq);
    expect(await deps.writer.write((tx) => requeueFailed(tx, undefined))).toBe(1);
    await sleep(TTL_MS + 1000);
    frozen.proc.kill('SIGCONT');
    // the 3rd is still poison: it parks again at once, holding the 4th and 5th
    await eventually(async () => (await rowsOf(victim)).map((r) => r.status).join() === 'sent,sent,failed,pending,pending', {
      timeoutMs: 30_000,
      what: 'the 3rd parked again',
    });
    await cure(v[2]!.seq);
    expect(await deps.writer.write((tx) => requeueFailed(tx, v[2]!.id))).toBe(1);
    await eventually(async () => (await rowsOf(victim)).map((r) => r.status).join() === 'sent,sent,sent,sent,failed', {
      timeoutMs: 30_000,
      what: 'the 5th parked',
    });
    await eventually(async () => (await statusCount('pending')) === 0, { timeoutMs: 30_000, what: 'backlog drained' });

    // restart with another partition count: only the parked 5th is unsent, so the change is allowed
    expect((await a.stop('SIGTERM')).code).toBe(0);
    expect((await b.stop('SIGTERM')).code).toBe(0);
    a = await startRelay('relay-a', { OUTBOX_PARTITIONS: '3' });
    b = await startRelay('relay-b', { OUTBOX_PARTITIONS: '3' });
    await withOutput(
      a,
      eventually(async () => Number((await client.execute('SELECT count FROM outbox_partitions')).rows[0]![0]) === 3, {
        timeoutMs: 20_000,
        what: '3 partitions',
      }),
    );
    expectResponse(await accounts.deposit(victim, 99)); // the 6th, held behind the parked 5th
    await accounts.openMany(100);
    await cure(v[4]!.seq);
    await sleep(500);
    expect(await deps.writer.write((tx) => requeueFailed(tx, v[4]!.id))).toBe(1);
    await withOutput(
      a,
      eventually(async () => (await statusCount('sent')) === Number((await client.execute('SELECT count(*) FROM outbox')).rows[0]![0]), {
        timeoutMs: 30_000,
        what: 'everything sent',
      }),
    );

    const msgs = await readStream(nc, stream);
    const all = (await client.execute('SELECT id, aggregate_id FROM outbox ORDER BY seq')).rows.map((r) => ({ id: String(r.id), agg: String(r.aggregate_id) }));
    const seen = new Set<string>();
    const firstByAgg = new Map<string, string[]>();
    for (const m of msgs) {
      const id = m.headers['Nats-Msg-Id']!;
      if (seen.has(id)) continue;
      seen.add(id);
      firstByAgg.set(m.headers['Aggregate-Id']!, [...(firstByAgg.get(m.headers['Aggregate-Id']!) ?? []), id]);
    }
    const want = new Map<string, string[]>();
    for (const r of all) want.set(r.agg, [...(want.get(r.agg) ?? []), r.id]);
    expect(seen.size).toBe(all.length);
    expect(msgs.length, 'no copy past the duplicate window').toBe(all.length);
    for (const [agg, ids] of want) expect(firstByAgg.get(agg), `order of ${agg}`).toEqual(ids);
    const versions = msgs.filter((m) => m.headers['Aggregate-Id'] === victim).map((m) => m.event.aggregateVersion);
    expect(versions).toEqual([...versions].sort((x, y) => x - y));
  });
});
