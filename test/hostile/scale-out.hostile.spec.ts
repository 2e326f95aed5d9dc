// Hostile edges of scale-out (outbox partitions, relay leases and fencing, subscriber instances), with real parts
// only: libSQL files opened by second connections (what another process has), a private nats-server for this file,
// relays and services as the code builds them. Each test states the guarantee it holds: leases lapsing mid-pass,
// fenced marks, partition-count changes under subscribers, rows without a partition, instances cut off from the broker.
import { createClient, type Client } from '@libsql/client';
import type { ConsumerInfo } from '@nats-io/jetstream';
import { connect as natsConnect, type NatsConnection } from '@nats-io/transport-node';
import { describe, expect, it } from 'vitest';
import { defineModules } from '../../src/compose/define-modules.ts';
import { createDatabase } from '../../src/db/open-database.ts';
import { createWriter } from '../../src/db/writer.ts';
import { DRIVER_BUSY_WAIT_MS, setBusyBudget } from '../../src/db/write-lock.ts';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import type { Subscriber } from '../../src/inbox/subscriber.ts';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { applyPartitionCount, PartitionCountChangeError } from '../../src/outbox/outbox-partitions.ts';
import { aggregateHash, partitionOf } from '../../src/outbox/partition.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import type { PendingRow } from '../../src/outbox/relay-store.ts';
import { accountCommands, creditedEvent, openedEvent } from '../support/accounts.ts';
import { createSubscriberDb, type SubscriberDb } from '../support/consumer.ts';
import { countRows, createTestDb, type TestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { accountsContext } from '../support/fixture/accounts/context.ts';
import { fixtureEvents } from '../support/fixture/modules.ts';
import { audit } from '../support/fixture/subscribers/audit/subscriber.ts';
import { freePort } from '../support/process.ts';
import { startWriteLockHolder } from '../support/write-lock.ts';
import { drainOutbox, relayDeps, type RelayOverrides } from '../support/relay.ts';
import { createTestService } from '../support/service.ts';
import { durablesOf, freshStream, publishRaw, readStream, streamEnv, type StreamEntry } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A second connection and write queue on the test database: what another relay process has. */
function otherProcess(t: TestDb) {
  const client = createClient({ url: t.url, timeout: 5000 });
  const db = createDatabase(client);
  return { client, db, writer: createWriter(db), [Symbol.dispose]: () => client.close() };
}

/** A NATS URL nobody listens on: a relay or subscriber instance whose broker is unreachable (wrong URL, network partition). */
async function deadNatsUrl(): Promise<string> {
  return `nats://127.0.0.1:${await freePort()}`;
}

/** A gate a fault hook waits at until the test opens it. */
function gate() {
  let open: () => void = () => undefined;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { wait: () => opened, open: () => open() };
}

async function leaseRows(client: Client, scope = 'relay') {
  const rs = await client.execute({ sql: 'SELECT partition, owner, epoch FROM leases WHERE scope = ? ORDER BY partition', args: [scope] });
  return rs.rows.map((r) => ({ partition: Number(r.partition), owner: r.owner === null ? null : String(r.owner), epoch: Number(r.epoch) }));
}

/** Aggregate id → the aggregate versions in stream order. */
function versionsInStream(entries: StreamEntry[]): Map<string, number[]> {
  const out = new Map<string, number[]>();
  for (const e of entries) out.set(e.event.aggregateId, [...(out.get(e.event.aggregateId) ?? []), e.event.aggregateVersion]);
  return out;
}

/** Each aggregate's events appear in the stream once each, in version order. */
function expectStreamInAggregateOrder(entries: StreamEntry[]) {
  const ids = entries.map((e) => e.headers['Nats-Msg-Id']);
  expect(new Set(ids).size).toBe(ids.length);
  for (const [agg, versions] of versionsInStream(entries)) expect(versions, agg).toEqual([...versions].sort((a, b) => a - b));
}

/** Opens `n` accounts and credits each `credits` times, one command at a time per account: 1 + credits rows per aggregate. */
async function accountsWithCredits(t: TestDb, n: number, credits: number): Promise<string[]> {
  const cmds = accountCommands(t.deps);
  const ids = await cmds.openMany(n);
  for (let k = 0; k < credits; k++) await Promise.all(ids.map((id) => cmds.deposit(id, 100)));
  return ids;
}

describe('relay - a mark fenced by a lease lost and regained during the pass', () => {
  it('rows acknowledged by the broker whose mark was fenced are marked sent by a later pass: none stays pending below the floor', async () => {
    await using t = await createTestDb();
    using other = otherProcess(t);
    const stream = await freshStream(nats().nc, 'HOF');
    await applyPartitionCount(t.deps.writer, 2); // as a relay with OUTBOX_PARTITIONS=2 would, on an empty outbox
    await accountsWithCredits(t, 20, 2); // 60 rows, 3 per aggregate, over partitions 0 and 1
    const firstPass = gate();
    let pass1: PendingRow[] | undefined;
    let reachedGate = false;
    // relay a: batch 20, so the backlog fills whole batches and a pass's mark runs while the next pass publishes
    const a = createRelay(
      relayDeps(t, nats().url, {
        stream,
        partitions: 2,
        settings: { batch: 20 },
        lease: { owner: 'relay-a', ttlMs: 900 },
        faults: {
          // a slow broker: the first pass's PubAcks are in, its mark not yet written, for a while
          afterPubAcks: async (rows) => {
            if (pass1) return;
            pass1 = rows;
            reachedGate = true;
            await firstPass.wait();
          },
        },
      }),
    );
    const stopA = new AbortController();
    const runA = a.run({ signal: stopA.signal, timeLimitMs: 30_000 });
    try {
      await eventually(() => reachedGate, { what: 'relay a in its first pass, PubAcks in, mark not written' });
      expect(pass1!.some((r) => r.partition === 1)).toBe(true);
      // relay b joins (a new pod, rolled back a moment later)
      const b = createRelay(relayDeps(t, nats().url, { stream, db: other.db, writer: other.writer, partitions: 2, lease: { owner: 'relay-b', ttlMs: 900 } }));
      const stopB = new AbortController();
      const runB = b.run({ signal: stopB.signal, timeLimitMs: 30_000 });
      await eventually(async () => (await leaseRows(t.client)).some((r) => r.owner === 'relay-b'), { what: 'relay a handing partition 1 to relay b' });
      stopB.abort(); // the rollback: b releases what it holds
      await runB;
      await eventually(async () => (await leaseRows(t.client)).every((r) => r.owner === 'relay-a') && a.leases()?.partitions.length === 2, {
        what: 'relay a holding both partitions again, partition 1 at a new epoch',
      });
      expect((await leaseRows(t.client)).find((r) => r.partition === 1)!.epoch).toBe(3);
      firstPass.open();
      // every row is in the stream; every row must end up sent
      await eventually(async () => (await readStream(nats().nc, stream)).length === 60, { what: 'every row in the stream', timeoutMs: 5000 });
      const stuck = async () =>
        (await t.client.execute("SELECT seq, partition FROM outbox WHERE status = 'pending' ORDER BY seq")).rows.map((r) => [
          Number(r.seq),
          Number(r.partition),
        ]);
      // the relay is alive and publishing: new rows go out
      const later = await accountCommands(t.deps).openMany(5);
      await eventually(async () => (await countRows(t.client, 'outbox', "status = 'sent'")) >= 60 - 20 + later.length, { what: 'the later rows sent' });
      await sleep(2000); // many passes and renewals (a third of 900 ms), with nothing else happening
      const firstPassOfPartition1 = pass1!.filter((r) => r.partition === 1).map((r) => [r.seq, 1]);
      expect(await stuck(), `rows PubAck-ed by the broker but still pending (relay a's first pass read ${JSON.stringify(firstPassOfPartition1)})`).toEqual([]);
    } finally {
      firstPass.open();
      stopA.abort();
      await runA;
    }
  });

  it('held: a lease taken over between fetch and mark by a healthy relay: the stale marks are fenced, the new owner marks them, every row once in aggregate order, no attempt counted', async () => {
    await using t = await createTestDb();
    using other = otherProcess(t);
    const stream = await freshStream(nats().nc, 'HOH');
    await applyPartitionCount(t.deps.writer, 2);
    await accountsWithCredits(t, 20, 2);
    const firstPass = gate();
    let reachedGate = false;
    let gated = false;
    const a = createRelay(
      relayDeps(t, nats().url, {
        stream,
        partitions: 2,
        settings: { batch: 20 },
        lease: { owner: 'relay-a', ttlMs: 900 },
        faults: {
          afterPubAcks: async () => {
            if (gated) return;
            gated = true;
            reachedGate = true;
            await firstPass.wait();
          },
        },
      }),
    );
    // b publishes with batch 1: very different batch sizes on one outbox
    const b = createRelay(
      relayDeps(t, nats().url, { stream, db: other.db, writer: other.writer, partitions: 2, settings: { batch: 1 }, lease: { owner: 'relay-b', ttlMs: 900 } }),
    );
    const stop = new AbortController();
    const runA = a.run({ signal: stop.signal, timeLimitMs: 30_000 });
    let runB: Promise<unknown> | undefined;
    try {
      await eventually(() => reachedGate, { what: 'relay a in its first pass' });
      runB = b.run({ signal: stop.signal, timeLimitMs: 30_000 });
      await eventually(async () => (await leaseRows(t.client)).some((r) => r.owner === 'relay-b'), { what: 'relay b taking partition 1' });
      firstPass.open();
      await eventually(async () => (await countRows(t.client, 'outbox', "status = 'sent'")) === 60, { what: 'every row sent', timeoutMs: 10_000 });
      expect(await countRows(t.client, 'outbox', 'attempts > 0')).toBe(0);
      const entries = await readStream(nats().nc, stream);
      expect(entries).toHaveLength(60);
      expectStreamInAggregateOrder(entries);
    } finally {
      firstPass.open();
      stop.abort();
      await Promise.all([runA, runB]);
    }
  });
});

describe('relay - its lease lapsing locally while a claim waits for a foreign write lock', () => {
  it('rows a pass skipped because its lease lapsed mid-pass are published once a claim that waited for the write lock renews the lease: none stays below the floor', async () => {
    await using t = await createTestDb();
    // the relay's own connection, opened as boot.ts opens it (a short driver timeout, DATABASE_BUSY_TIMEOUT_MS as the budget)
    const client = createClient({ url: t.url, timeout: DRIVER_BUSY_WAIT_MS });
    setBusyBudget(client, 10_000);
    const db = createDatabase(client);
    await using lock = await startWriteLockHolder(t.url);
    const stream = await freshStream(nats().nc, 'HOL');
    const ids = await accountCommands(t.deps).openMany(30);
    const slowPass = gate();
    let reachedGate = false;
    const relay = createRelay(
      relayDeps(t, nats().url, {
        stream,
        db,
        writer: createWriter(db),
        lease: { owner: 'relay-a', ttlMs: 3000 },
        faults: {
          // a slow pass (a GC pause, a slow broker): its rows are read, none published yet
          beforePublishing: async () => {
            if (reachedGate) return;
            reachedGate = true;
            await slowPass.wait();
          },
        },
      }),
    );
    const expiresAt = async () => Number((await t.client.execute("SELECT expires_at FROM leases WHERE scope = 'relay' AND partition = 0")).rows[0]!.expires_at);
    const stop = new AbortController();
    const running = relay.run({ signal: stop.signal, timeLimitMs: 30_000 });
    try {
      await eventually(() => reachedGate, { what: 'the first pass, its rows read' });
      // Two long write transactions of another process (a big import, a compaction), timed around the relay's renewals
      // (every 1000 ms): the first delays a claim, which then counts its lease from when it started; the second delays
      // the next claim past that, so the lease lapses locally while the claim still waits, and then succeeds late.
      const seen = await expiresAt();
      await eventually(async () => (await expiresAt()) !== seen, { what: 'a renewal' });
      const t0 = Date.now();
      await sleep(200);
      await lock.lock();
      await sleep(t0 + 2600 - Date.now());
      await lock.release();
      await sleep(t0 + 3000 - Date.now());
      await lock.lock();
      await eventually(() => relay.leases()?.partitions.length === 0, { what: 'the lease lapsing locally', timeoutMs: 5000 });
      slowPass.open(); // the pass goes on: its lease has lapsed, so it publishes none of its rows (as it should)
      await sleep(150);
      await lock.release(); // the waiting claim commits, well inside the TTL it started with
      await eventually(() => relay.leases()?.partitions.length === 16, { what: 'the relay working on its partitions again' });
      // the relay is alive and publishing: new rows go out
      const later = await accountCommands(t.deps).openMany(5);
      await eventually(async () => (await countRows(t.client, 'outbox', "status = 'sent'")) >= later.length, { what: 'the later rows sent' });
      await sleep(2000);
      const published = new Set((await readStream(nats().nc, stream)).map((e) => e.headers['Nats-Msg-Id']));
      const neverPublished = (await t.client.execute("SELECT id FROM outbox WHERE status = 'pending'")).rows
        .map((r) => String(r.id))
        .filter((id) => !published.has(id));
      expect(neverPublished, `committed rows never published (of the ${ids.length} the slow pass read)`).toEqual([]);
    } finally {
      slowPass.open();
      await lock.release().catch(() => undefined);
      stop.abort();
      await running;
      client.close();
    }
  });
});

describe('relay - a relay that cannot publish', () => {
  it('a relay that cannot reach the broker does not keep its partitions from a relay that can: their rows are published within a few lease TTLs', async () => {
    await using t = await createTestDb();
    using other = otherProcess(t);
    const stream = await freshStream(nats().nc, 'HOD');
    await applyPartitionCount(t.deps.writer, 2);
    const ttlMs = 900;
    const healthy = createRelay(relayDeps(t, nats().url, { stream, partitions: 2, lease: { owner: 'relay-a', ttlMs } }));
    // relay b reaches the broker until it is cut off from it (a network partition between its host and NATS)
    let cut = false;
    let cutOffConnection: NatsConnection | undefined;
    const cutOff = createRelay(
      relayDeps(t, nats().url, {
        stream,
        db: other.db,
        writer: other.writer,
        partitions: 2,
        lease: { owner: 'relay-b', ttlMs },
        connect: async () => {
          if (cut) throw new Error('connection refused');
          cutOffConnection = await natsConnect({ servers: [nats().url], maxReconnectAttempts: 0 });
          return cutOffConnection;
        },
      }),
    );
    const stop = new AbortController();
    const runs = [healthy.run({ signal: stop.signal, timeLimitMs: 30_000 }), cutOff.run({ signal: stop.signal, timeLimitMs: 30_000 })];
    try {
      await eventually(async () => new Set((await leaseRows(t.client)).map((r) => r.owner)).size === 2, { what: 'one partition each' });
      cut = true;
      await cutOffConnection?.close();
      await accountCommands(t.deps).openMany(40);
      const deadline = Date.now() + 6 * ttlMs;
      while (Date.now() < deadline && (await countRows(t.client, 'outbox', "status = 'pending'")) > 0) await sleep(50);
      const pendingByOwner = (
        await t.client.execute(
          "SELECT l.owner, count(*) AS n FROM outbox o JOIN leases l ON l.scope = 'relay' AND l.partition = o.partition WHERE o.status = 'pending' GROUP BY l.owner",
        )
      ).rows.map((r) => `${String(r.owner)}: ${Number(r.n)}`);
      expect(pendingByOwner, `rows still pending after ${6 * ttlMs} ms, by the relay leasing their partition`).toEqual([]);
    } finally {
      stop.abort();
      await Promise.all(runs);
    }
  });
});

describe('relay - rows stored without aggregate_hash', () => {
  it('a row an API of the release before partitions stores (no aggregate_hash, partition 0) is not published ahead of its aggregate’s earlier row', async () => {
    await using t = await createTestDb();
    using other = otherProcess(t);
    const stream = await freshStream(nats().nc, 'HOR');
    await applyPartitionCount(t.deps.writer, 2);
    const held = gate();
    const firstRowOf = new Set<string>();
    const faults = {
      // a slow pass (GC, a slow broker) of whichever relay reads the aggregate's first row
      beforePublishing: async (rows: PendingRow[]) => {
        if (rows.some((r) => firstRowOf.has(r.id))) await held.wait();
      },
    };
    const a = createRelay(relayDeps(t, nats().url, { stream, partitions: 2, lease: { owner: 'relay-a', ttlMs: 900 }, faults }));
    const b = createRelay(
      relayDeps(t, nats().url, { stream, db: other.db, writer: other.writer, partitions: 2, lease: { owner: 'relay-b', ttlMs: 900 }, faults }),
    );
    const stop = new AbortController();
    const runs = [a.run({ signal: stop.signal, timeLimitMs: 30_000 }), b.run({ signal: stop.signal, timeLimitMs: 30_000 })];
    try {
      await eventually(async () => new Set((await leaseRows(t.client)).map((r) => r.owner)).size === 2, { what: 'one partition each' });
      // an aggregate of partition 1, its first event stored by the current API
      let accountId = '';
      for (let k = 0; ; k++) {
        const id = `legacy-${process.pid}-${k}`;
        if (partitionOf('account', id, 2) === 1) {
          accountId = id;
          break;
        }
      }
      const first = openedEvent({ accountId });
      firstRowOf.add(first.eventId);
      await t.client.execute({
        sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, headers, status, attempts, occurred_at, available_at, aggregate_hash, partition)
              VALUES (?, 'account', ?, ?, ?, '{}', 'pending', 0, 0, 0, ?, 1)`,
        args: [first.eventId, accountId, first.type, JSON.stringify(first), aggregateHash('account', accountId)],
      });
      await sleep(200);
      // its next event stored by an API replica of the previous release (the insert of the schema before 0005)
      const second = creditedEvent({ accountId, version: 2 });
      await other.client.execute({
        sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, headers, status, attempts, occurred_at, available_at)
              VALUES (?, 'account', ?, ?, ?, '{}', 'pending', 0, 0, 0)`,
        args: [second.eventId, accountId, second.type, JSON.stringify(second)],
      });
      await sleep(1000);
      held.open();
      await eventually(async () => (await countRows(t.client, 'outbox', "status = 'sent'")) === 2, { what: 'both rows sent' });
      const entries = await readStream(nats().nc, stream);
      expect(entries.map((e) => `${e.event.aggregateVersion} on ${e.subject}`)).toEqual([
        `1 on ${stream.prefix}.account.${accountId}.1`,
        `2 on ${stream.prefix}.account.${accountId}.1`,
      ]);
    } finally {
      held.open();
      stop.abort();
      await Promise.all(runs);
    }
  });
});

describe('outbox - concurrent partition count changes', () => {
  it('held: two processes applying different counts while commands and a relay run never leave an aggregate pending in two partitions, and every row is published in aggregate order', async () => {
    await using t = await createTestDb();
    using p1 = otherProcess(t);
    using p2 = otherProcess(t);
    const stream = await freshStream(nats().nc, 'HOC');
    const ids = await accountCommands(t.deps).openMany(12);
    const relayStop = new AbortController();
    const relay = createRelay(relayDeps(t, nats().url, { stream, partitions: 16, lease: { owner: 'relay-a', ttlMs: 900 } }));
    const running = relay.run({ signal: relayStop.signal, timeLimitMs: 30_000 });
    const until = Date.now() + 2500;
    let changes = 0;
    let refusals = 0;
    const split: string[] = [];
    const checkSplit = async () => {
      const rs = await t.client.execute(
        "SELECT aggregate_id, count(DISTINCT partition) AS n FROM outbox WHERE status = 'pending' GROUP BY aggregate_id HAVING n > 1",
      );
      for (const r of rs.rows) split.push(String(r.aggregate_id));
    };
    const applier = async (writer: ReturnType<typeof createWriter>, count: number) => {
      while (Date.now() < until) {
        try {
          const res = await applyPartitionCount(writer, count);
          if (res.previous !== res.count) changes++;
        } catch (error) {
          if (!(error instanceof PartitionCountChangeError)) throw error;
          refusals++;
        }
        await checkSplit();
        await sleep(Math.random() * 20);
      }
    };
    const commands = async () => {
      const cmds = accountCommands(t.deps);
      while (Date.now() < until) {
        await cmds.deposit(ids[Math.floor(Math.random() * ids.length)]!, 1);
        // pauses now and then, so the relay drains to zero and a change can happen
        await sleep(Math.random() < 0.1 ? 150 : 2);
      }
    };
    try {
      await Promise.all([applier(p1.writer, 3), applier(p2.writer, 7), commands(), commands()]);
      await eventually(async () => (await countRows(t.client, 'outbox', "status = 'pending'")) === 0, { what: 'every row sent' });
    } finally {
      relayStop.abort();
      await running;
    }
    expect(split).toEqual([]);
    expect(changes).toBeGreaterThan(0);
    expect(refusals).toBeGreaterThan(0);
    const entries = await readStream(nats().nc, stream);
    expect(entries).toHaveLength(await countRows(t.client, 'outbox'));
    expectStreamInAggregateOrder(entries);
  });
});

// ---------------------------------------------------------------------------------------------------------------------
// Subscribers

const TTL_MS = 1500;

/** A client of its own over the shared subscriber database, waiting for the other instances' writes as a process would. */
function sharedClient(url: string): Client {
  const client = createClient({ url, timeout: DRIVER_BUSY_WAIT_MS });
  setBusyBudget(client, 10_000);
  return client;
}

type Instance = Awaited<ReturnType<typeof createTestService>>;

/** One instance (ROLES=consumers, `audit` alone) of the subscriber over `sdb` and `stream`. */
function startInstance(name: string, sdb: SubscriberDb, stream: StreamSettings, env: Record<string, string> = {}, subscriber?: Subscriber): Promise<Instance> {
  return createTestService(
    {
      ROLES: 'consumers',
      CONSUMERS: 'audit',
      NATS_URL: nats().url,
      ...streamEnv(stream),
      INSTANCE_NAME: name,
      RELAY_LEASE_TTL_MS: String(TTL_MS),
      CONSUMER_ACK_WAIT_MS: '3000',
      ...env,
    },
    {
      openSubscriberDb: async () => sharedClient(sdb.url),
      ...(subscriber ? { modules: defineModules({ events: fixtureEvents, contexts: [accountsContext], subscribers: [subscriber] }) } : {}),
    },
  );
}

const leasesOf = (s: Instance) => s.service.consumers[0]!.leases();

/** Each account's versions in the order the subscriber applied them (audit_log.n). */
async function appliedVersions(client: Client): Promise<Map<string, number[]>> {
  const rows = (await client.execute('SELECT account_id, aggregate_version FROM audit_log ORDER BY n')).rows;
  const out = new Map<string, number[]>();
  for (const r of rows) out.set(String(r.account_id), [...(out.get(String(r.account_id)) ?? []), Number(r.aggregate_version)]);
  return out;
}

async function durablesOn(stream: StreamSettings): Promise<ConsumerInfo[]> {
  return durablesOf(nats().nc, stream.name);
}

/** Relay runs until idle over `t`, with OUTBOX_PARTITIONS = `partitions` (applied at its start, as in production). */
const relayUntilIdle = (t: TestDb, stream: StreamSettings, partitions: number, over: RelayOverrides = {}) =>
  drainOutbox(relayDeps(t, nats().url, { stream, partitions, ...over }));

describe('subscribers - a change of the partition count', () => {
  it('single mode keeps each aggregate in order across a partition count change when an earlier event of the aggregate must be retried', async () => {
    await using t = await createTestDb();
    await using sdb = await createSubscriberDb({ subscriber: 'audit' });
    const stream = await freshStream(nats().nc, 'HOS');
    // Count 4 first, then the documented change to 16 (nothing pending when it is applied).
    await relayUntilIdle(t, stream, 4);
    const cmds = accountCommands(t.deps);
    const movedBy = (id: string) => partitionOf('account', id, 4) !== partitionOf('account', id, 16);
    const ids = await cmds.openMany(8);
    // at least two aggregates whose subject keeps its partition token (the control) and two whose token changes
    while (ids.filter(movedBy).length < 2 || ids.filter((id) => !movedBy(id)).length < 2) ids.push(await cmds.open());
    await relayUntilIdle(t, stream, 4);
    await relayUntilIdle(t, stream, 16);
    for (const id of ids) await cmds.deposit(id, 100);
    await relayUntilIdle(t, stream, 16);
    const moved = ids.filter(movedBy);
    // audit, whose first attempt at each opened event fails (a deadlock, a timeout: anything a retry fixes)
    const failedOnce = new Set<string>();
    const flaky: Subscriber = {
      ...audit,
      handle: async (tx, e: IntegrationEvent, ctx) => {
        if (e.type === 'account.opened.v1' && !failedOnce.has(e.eventId)) {
          failedOnce.add(e.eventId);
          throw new Error('transient failure');
        }
        await audit.handle(tx, e, ctx);
      },
    };
    await using s = await startInstance('single', sdb, stream, {}, flaky);
    await eventually(async () => (await countRows(sdb.client, 'audit_log')) === 2 * ids.length, { what: 'every event applied', timeoutMs: 15_000 });
    const applied = await appliedVersions(sdb.client);
    const outOfOrder = (list: string[]) =>
      list.filter((id) => JSON.stringify(applied.get(id)) !== '[1,2]').map((id) => `${id}: ${JSON.stringify(applied.get(id))}`);
    expect(leasesOf(s).mode).toBe('single');
    // control: where both events share a subject, the retried first event holds the second back
    expect(outOfOrder(ids.filter((id) => !movedBy(id)))).toEqual([]);
    expect(outOfOrder(moved), `aggregates whose partition token changed with the count (${moved.length}), applied out of order`).toEqual([]);
  });

  it('partitioned: after the relays raised the count, a subscriber restarted with the new count still applies the events of the new partitions published meanwhile', async () => {
    await using t = await createTestDb();
    await using sdb = await createSubscriberDb({ subscriber: 'audit' });
    const stream = await freshStream(nats().nc, 'HOP');
    await relayUntilIdle(t, stream, 4);
    const four = await startInstance('four', sdb, stream, { CONSUMER_PARTITIONED: 'true', OUTBOX_PARTITIONS: '4' });
    let sixteen: Instance | undefined;
    try {
      await eventually(async () => (await durablesOn(stream)).length === 4 && leasesOf(four).partitions.length === 4, { what: 'four partition durables' });
      const cmds = accountCommands(t.deps);
      const before = await cmds.openMany(8);
      await relayUntilIdle(t, stream, 4);
      await eventually(async () => (await countRows(sdb.client, 'inbox')) === before.length, { what: 'the events of count 4 applied' });
      // step 1-3 of "Changing the partition count": nothing pending, the relays restarted with 16, writers again
      await relayUntilIdle(t, stream, 16);
      const after = await cmds.openMany(24);
      await relayUntilIdle(t, stream, 16);
      // step 4: the subscriber has caught up: every durable with nothing pending and nothing unacknowledged
      await eventually(async () => (await durablesOn(stream)).every((c) => c.num_pending === 0 && c.num_ack_pending === 0), {
        what: 'the subscriber caught up (inbox_consumer_pending_messages at 0)',
      });
      await four.close();
      sixteen = await startInstance('sixteen', sdb, stream, { CONSUMER_PARTITIONED: 'true' });
      await eventually(async () => (await durablesOn(stream)).length === 16, { what: 'sixteen partition durables', timeoutMs: 10_000 });
      const total = before.length + after.length;
      const deadline = Date.now() + 6000;
      while (Date.now() < deadline && (await countRows(sdb.client, 'inbox')) < total) await sleep(100);
      const applied = new Set((await sdb.client.execute('SELECT account_id FROM audit_log')).rows.map((r) => String(r.account_id)));
      const missing = after.filter((id) => !applied.has(id)).map((id) => `${id} (partition ${partitionOf('account', id, 16)} of 16)`);
      const starts = [...new Set((await durablesOn(stream)).map((c) => c.config.opt_start_seq))];
      expect(missing, `events never applied; the new durables start at stream sequence ${starts.join(', ')}`).toEqual([]);
    } finally {
      await four.close();
      await sixteen?.close();
    }
  });
});

describe('subscribers - INSTANCE_NAME given twice', () => {
  it('held: two instances started with the same INSTANCE_NAME still lease apart: one consumes, the other stands by, each event applied once', async () => {
    await using sdb = await createSubscriberDb({ subscriber: 'audit' });
    const stream = await freshStream(nats().nc, 'HOI');
    await using first = await startInstance('same', sdb, stream);
    await using second = await startInstance('same', sdb, stream);
    await eventually(() => leasesOf(first).members === 2 && leasesOf(second).members === 2, { what: 'two members' });
    expect(leasesOf(first).owner).not.toBe(leasesOf(second).owner);
    await eventually(() => leasesOf(first).partitions.length + leasesOf(second).partitions.length === 1, { what: 'one holder' });
    const events = Array.from({ length: 20 }, (_, k) =>
      k % 2 ? creditedEvent({ accountId: 'same-acc', version: k + 1 }) : openedEvent({ accountId: 'same-acc', version: k + 1 }),
    );
    for (const e of events) await publishRaw(nats().nc, stream, e, e.eventId);
    await eventually(async () => (await countRows(sdb.client, 'audit_log')) === 20, { what: 'every event applied' });
    expect((await appliedVersions(sdb.client)).get('same-acc')).toEqual(Array.from({ length: 20 }, (_, k) => k + 1));
  });
});

describe('subscribers - an instance that cannot consume', () => {
  it('single mode: an instance whose broker is unreachable does not keep the subscriber from a healthy instance: events are applied within a few lease TTLs', async () => {
    await using sdb = await createSubscriberDb({ subscriber: 'audit' });
    const stream = await freshStream(nats().nc, 'HOU');
    await using healthy = await startInstance('b-healthy', sdb, stream);
    await eventually(() => leasesOf(healthy).partitions.length === 1 && !leasesOf(healthy).standby, { what: 'the healthy instance consuming' });
    const early = openedEvent();
    await publishRaw(nats().nc, stream, early, early.eventId);
    await eventually(async () => (await countRows(sdb.client, 'inbox')) === 1, { what: 'the first event applied' });
    // a second instance joins from a host that cannot reach the broker (network partition, wrong NATS_URL)
    await using cutOff = await startInstance('a-cut-off', sdb, stream, { NATS_URL: await deadNatsUrl() });
    await sleep(3 * TTL_MS);
    const events = Array.from({ length: 10 }, () => openedEvent());
    for (const e of events) await publishRaw(nats().nc, stream, e, e.eventId);
    const deadline = Date.now() + 5 * TTL_MS;
    while (Date.now() < deadline && (await countRows(sdb.client, 'inbox')) < 11) await sleep(100);
    const where = `the lease: ${JSON.stringify({ healthy: leasesOf(healthy), cutOff: leasesOf(cutOff) })}`;
    expect(await countRows(sdb.client, 'inbox'), where).toBe(11);
  });
});
