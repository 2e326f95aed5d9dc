// Several instances of one subscriber (services with the consumers role) over its one database and one stream:
// partitioned they split the outbox partitions, single one of them consumes while the others stand by, and across
// every hand-over (a stop, a rebalance, a switch of mode) each event is applied once, each aggregate's in order.
import { createClient, type Client } from '@libsql/client';
import { jetstream, type ConsumerInfo } from '@nats-io/jetstream';
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { defineModules } from '../../src/compose/define-modules.ts';
import { ConfigError } from '../../src/config.ts';
import { DRIVER_BUSY_WAIT_MS, setBusyBudget } from '../../src/db/write-lock.ts';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { fencedWriter, handBackWhenFenced, LeaseFencedError } from '../../src/inbox/lease-fence.ts';
import { DurableLayoutError } from '../../src/inbox/partition-durables.ts';
import type { Subscriber } from '../../src/inbox/subscriber.ts';
import { sleep } from '../../src/worker/sleep.ts';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { createSubscriberDb, type SubscriberDb } from '../support/consumer.ts';
import { countRows } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { accountsContext } from '../support/fixture/accounts/context.ts';
import { fixtureEvents } from '../support/fixture/modules.ts';
import { audit } from '../support/fixture/subscribers/audit/subscriber.ts';
import { createTestService } from '../support/service.ts';
import { durablesOf, freshStream, publishRaw, streamEnv } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();
const TTL_MS = 1500;
const BASE = 'hono-outbox-audit'; // durableNameOf(SERVICE_NAME default, 'audit')

/** A client of its own over the shared subscriber database, waiting for the other instances' writes as a process would. */
function sharedClient(url: string): Client {
  const client = createClient({ url, timeout: DRIVER_BUSY_WAIT_MS });
  setBusyBudget(client, 10_000);
  return client;
}

type Instance = Awaited<ReturnType<typeof createTestService>>;

/** One instance (a service with the consumers role, `audit` alone) of the subscriber over `sdb` and `stream`. */
function startInstance(name: string, sdb: SubscriberDb, stream: StreamSettings, env: Record<string, string> = {}, subscriber?: Subscriber) {
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
const processedBy = (s: Instance) => s.service.metrics.counter('inbox_processed_total', '').get({ consumer: 'audit' });
const duplicatesBy = (s: Instance) => s.service.metrics.counter('inbox_duplicates_total', '').get({ consumer: 'audit' });

/** Publishes version `from` … `to` of each account (opened, then credits), one version of every account at a time. */
async function publishVersions(stream: StreamSettings, accounts: readonly string[], from: number, to: number): Promise<void> {
  for (let version = from; version <= to; version++)
    await Promise.all(
      accounts.map((accountId) => {
        const e = version === 1 ? openedEvent({ accountId }) : creditedEvent({ accountId, version });
        return publishRaw(nats().nc, stream, e, e.eventId);
      }),
    );
}

/** Each account's versions in the order the subscriber applied them (audit_log.n). */
async function appliedVersions(client: Client): Promise<Map<string, number[]>> {
  const rows = (await client.execute('SELECT account_id, aggregate_version FROM audit_log ORDER BY n')).rows;
  const out = new Map<string, number[]>();
  for (const r of rows) out.set(String(r.account_id), [...(out.get(String(r.account_id)) ?? []), Number(r.aggregate_version)]);
  return out;
}

/** Waits until `total` events are in the inbox, then checks each took effect once and each account's in version order. */
async function expectAllOnceInOrder(sdb: SubscriberDb, accounts: readonly string[], versions: number): Promise<void> {
  const total = accounts.length * versions;
  await eventually(async () => (await countRows(sdb.client, 'inbox')) >= total, { timeoutMs: 30_000, what: `${total} events applied` });
  expect(await countRows(sdb.client, 'inbox')).toBe(total);
  expect(await countRows(sdb.client, 'audit_log')).toBe(total);
  const applied = await appliedVersions(sdb.client);
  const expected = Array.from({ length: versions }, (_, i) => i + 1);
  for (const a of accounts) expect(applied.get(a), a).toEqual(expected);
}

const accountsNamed = (tag: string, n: number) => Array.from({ length: n }, (_, i) => `${tag}-${process.pid}-${i}`);

async function durablesOn(stream: StreamSettings): Promise<ConsumerInfo[]> {
  const out = await durablesOf(nats().nc, stream.name);
  return out.sort((a, b) => a.name.localeCompare(b.name, 'en', { numeric: true }));
}

describe('subscriber instances - partitioned', () => {
  it('two instances split the partitions fairly, one durable each filtered on its partition, and together apply every event once in per-aggregate order', async () => {
    const stream = await freshStream(nats().nc, 'SIP');
    await using sdb = await createSubscriberDb({ subscriber: 'audit' });
    await using a = await startInstance('a', sdb, stream, { CONSUMER_PARTITIONED: 'true' });
    await using b = await startInstance('b', sdb, stream, { CONSUMER_PARTITIONED: 'true' });
    await eventually(() => leasesOf(a).partitions.length === 8 && leasesOf(b).partitions.length === 8, { what: 'eight partitions each' });
    expect([...leasesOf(a).partitions, ...leasesOf(b).partitions].sort((x, y) => x - y)).toEqual(Array.from({ length: 16 }, (_, k) => k));
    expect(leasesOf(a)).toMatchObject({ mode: 'partitioned', members: 2, standby: false });

    const accounts = accountsNamed('sip', 120);
    await publishVersions(stream, accounts, 1, 3);
    await expectAllOnceInOrder(sdb, accounts, 3);
    expect(processedBy(a)).toBeGreaterThan(0);
    expect(processedBy(b)).toBeGreaterThan(0);
    expect(processedBy(a) + processedBy(b)).toBe(360);

    const durables = await durablesOn(stream);
    expect(durables.map((c) => c.name)).toEqual(Array.from({ length: 16 }, (_, k) => `${BASE}-p${k}`));
    expect(durables.map((c) => c.config.filter_subject)).toEqual(Array.from({ length: 16 }, (_, k) => `${stream.prefix}.account.*.${k}`));
    // each instance reports the partitions it holds on /ready, and the gauge counts them
    const ready = (await (await a.app.request('/ready')).json()) as { status: string; leases: { subscribers: Array<{ partitions: number[] }> } };
    expect(ready.status).toBe('ready');
    expect(ready.leases.subscribers[0]!.partitions).toEqual(leasesOf(a).partitions);
    expect(await a.service.metrics.render()).toContain('inbox_partitions_owned{consumer="audit"} 8');
  });

  it('rebalances while a backlog is consumed: a second instance joining takes half the partitions, no event is applied twice and each aggregate stays in order', async () => {
    const stream = await freshStream(nats().nc, 'SIR');
    await using sdb = await createSubscriberDb({ subscriber: 'audit' });
    // Until the second instance holds its partitions, audit is slowed down. Events are applied one at a time (under
    // the database's write lock), so at 6 ms an event the 2,600 after the first 100 last at least 15 s, more than
    // starting the second instance and the 10 s allowed for the rebalance: the backlog outlasts it. The first
    // instance writes back to back all along, holding the lock; the joining one's lease claims get in because the
    // writers take turns on it (createWriter).
    let rebalanced = false;
    const slow: Subscriber = {
      ...audit,
      handle: async (tx, e, ctx) => {
        if (!rebalanced) await sleep(6);
        await audit.handle(tx, e, ctx);
      },
    };
    const env = { CONSUMER_PARTITIONED: 'true', CONSUMER_BATCH: '5' };
    const accounts = accountsNamed('sir', 900);
    await publishVersions(stream, accounts, 1, 3);

    await using a = await startInstance('a', sdb, stream, env, slow);
    await eventually(async () => (await countRows(sdb.client, 'inbox')) >= 100, { what: 'the first instance consuming the backlog' });
    await using b = await startInstance('b', sdb, stream, env, slow);
    await eventually(() => leasesOf(b).partitions.length === 8, { timeoutMs: 10_000, what: 'the second instance holding half the partitions' });
    expect(await countRows(sdb.client, 'inbox')).toBeLessThan(2700); // the rebalance happened with a backlog left
    rebalanced = true;
    await expectAllOnceInOrder(sdb, accounts, 3);
    expect(processedBy(b)).toBeGreaterThan(0);
    expect(processedBy(a) + processedBy(b)).toBe(2700);
  });
});

describe('subscriber instances - single', () => {
  it('one of two instances consumes, the other stands by (ready) and takes over when it stops, nothing applied twice', async () => {
    const stream = await freshStream(nats().nc, 'SIS');
    await using sdb = await createSubscriberDb({ subscriber: 'audit' });
    const a = await startInstance('a', sdb, stream);
    await using b = await startInstance('b', sdb, stream);
    let active: Instance = a;
    let standby: Instance = b;
    try {
      await eventually(
        () => {
          const [la, lb] = [leasesOf(a), leasesOf(b)];
          if (la.partitions.length + lb.partitions.length !== 1 || la.standby === lb.standby) return false;
          [active, standby] = la.standby ? [b, a] : [a, b];
          return true;
        },
        { what: 'one instance holding the lease, the other standing by' },
      );
      expect(leasesOf(active)).toMatchObject({ mode: 'single', partitions: [0], standby: false });
      const ready = (await (await standby.app.request('/ready')).json()) as { status: string; leases: { subscribers: unknown[] } };
      expect(ready.status).toBe('ready');
      expect(ready.leases.subscribers[0]).toMatchObject({ name: 'audit', mode: 'single', partitions: [], standby: true });

      const accounts = accountsNamed('sis', 40);
      await publishVersions(stream, accounts, 1, 2);
      await expectAllOnceInOrder(sdb, accounts, 2);
      expect(processedBy(active)).toBe(80);
      expect(processedBy(standby)).toBe(0);
      expect((await durablesOn(stream)).map((c) => c.name)).toEqual([BASE]);

      await active.close(); // graceful: the last batch acknowledged, the lease released
      const stoppedAt = Date.now();
      await publishVersions(stream, accounts, 3, 4);
      await eventually(() => leasesOf(standby).partitions.length === 1, { what: 'the standby taking the lease' });
      expect(Date.now() - stoppedAt).toBeLessThan(TTL_MS + 1000); // at its next renewal, not after the lease ran out
      await expectAllOnceInOrder(sdb, accounts, 4);
      expect(processedBy(standby)).toBe(80);
      expect(duplicatesBy(standby)).toBe(0);
    } finally {
      await a.close();
    }
  });
});

describe('subscriber instances - switching single to partitioned', () => {
  it('a partitioned instance stands by while a single one runs, then hands the position over: partition durables start after the single durable’s floor, which is deleted, nothing skipped or replayed', async () => {
    const stream = await freshStream(nats().nc, 'SIW');
    await using sdb = await createSubscriberDb({ subscriber: 'audit' });
    const accounts = accountsNamed('siw', 30);
    const single = await startInstance('single', sdb, stream);
    await using partitioned = await startInstance('partitioned', sdb, stream, { CONSUMER_PARTITIONED: 'true' });
    try {
      await publishVersions(stream, accounts, 1, 2);
      await expectAllOnceInOrder(sdb, accounts, 2);
      await eventually(() => leasesOf(partitioned).waitingFor === 'single', { what: 'the partitioned instance standing by' });
      expect(leasesOf(partitioned)).toMatchObject({ partitions: [], standby: true });
    } finally {
      await single.close();
    }
    // a backlog in the single durable when the switch happens: 30 events it never delivered
    await publishVersions(stream, accounts, 3, 3);
    await eventually(() => leasesOf(partitioned).partitions.length === 16, { what: 'the partitioned instance taking every partition' });
    await publishVersions(stream, accounts, 4, 4);
    await expectAllOnceInOrder(sdb, accounts, 4);
    expect(duplicatesBy(partitioned)).toBe(0);
    const durables = await durablesOn(stream);
    expect(durables.map((c) => c.name)).toEqual(Array.from({ length: 16 }, (_, k) => `${BASE}-p${k}`));
    for (const c of durables) expect(c.config).toMatchObject({ deliver_policy: 'by_start_sequence', opt_start_seq: 61 });
  });
});

describe('subscriber instances - the lease fence', () => {
  it("a write of a run whose lease was taken over commits nothing and hands its batch back; one under the lease's current epoch commits", async () => {
    await using sdb = await createSubscriberDb({ subscriber: 'audit' });
    await sdb.client.execute("INSERT INTO leases (scope, partition, owner, epoch, expires_at) VALUES ('audit', 3, 'a', 7, 0)");
    const write = (owner: string, epoch: number, id: string) =>
      fencedWriter(sdb.writer, { scope: 'audit', partition: 3, owner, epoch }).write(async (tx) => {
        await tx.run(sql`INSERT INTO audit_log (event_id, event_type, account_id, aggregate_version) VALUES (${id}, 't', 'x', 1)`);
      });
    await write('a', 7, 'first');
    await sdb.client.execute("UPDATE leases SET owner = 'b', epoch = 8 WHERE partition = 3"); // b acquired it
    await expect(write('a', 7, 'late')).rejects.toBeInstanceOf(LeaseFencedError);
    await write('b', 8, 'new-owner');
    expect((await sdb.client.execute('SELECT event_id FROM audit_log ORDER BY n')).rows.map((r) => r.event_id)).toEqual(['first', 'new-owner']);

    let stopped = 0;
    const batch = handBackWhenFenced(
      () => write('a', 7, 'late-batch').then(() => []),
      () => stopped++,
    );
    const msg = { subject: 's', headers: {}, payload: '{}', deliveryCount: 1, fallbackId: 'm-1' };
    expect(await batch([msg])).toEqual([{ outcome: 'deferred', eventId: 'm-1' }]);
    expect(stopped).toBe(1);
  });
});

describe('subscriber instances - refusals', () => {
  it('refuses a lease shorter than a pull request needs: RELAY_LEASE_TTL_MS below 1500 with the consumers role', async () => {
    const stream = await freshStream(nats().nc, 'SIT');
    await using sdb = await createSubscriberDb({ subscriber: 'audit' });
    await expect(startInstance('a', sdb, stream, { RELAY_LEASE_TTL_MS: '1000' })).rejects.toThrow(ConfigError);
  });

  it('refuses to run partitioned over a stream holding events without a partition token, which its durables would never receive', async () => {
    const stream = await freshStream(nats().nc, 'SIL');
    await using sdb = await createSubscriberDb({ subscriber: 'audit' });
    const legacy = openedEvent();
    await jetstream(nats().nc).publish(`${stream.prefix}.account.${legacy.aggregateId}`, JSON.stringify(legacy), { msgID: legacy.eventId });
    await using s = await startInstance('a', sdb, stream, { CONSUMER_PARTITIONED: 'true' });
    await expect(s.service.background).rejects.toThrow(DurableLayoutError);
    await expect(s.service.background).rejects.toThrow(/published before outbox partitions existed/);
    expect(await durablesOn(stream)).toEqual([]);
  });

  it('refuses a partition count change while the durables made for the old count still have messages to deliver', async () => {
    const stream = await freshStream(nats().nc, 'SIC');
    await using sdb = await createSubscriberDb({ subscriber: 'audit' });
    const four = await startInstance('four', sdb, stream, { CONSUMER_PARTITIONED: 'true', OUTBOX_PARTITIONS: '4' });
    await eventually(async () => (await durablesOn(stream)).length === 4, { what: 'four partition durables' });
    await four.close();
    // events of partitions 0 … 3 (of 16, as the relay now hashes them) wait in the old durables
    await publishVersions(stream, accountsNamed('sic', 20), 1, 1);
    await using sixteen = await startInstance('sixteen', sdb, stream, { CONSUMER_PARTITIONED: 'true' });
    await expect(sixteen.service.background).rejects.toThrow(/partition durables made for another partition count/);
    expect((await durablesOn(stream)).map((c) => c.name)).toEqual([0, 1, 2, 3].map((k) => `${BASE}-p${k}`));
  });
});
