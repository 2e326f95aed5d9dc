// A partition changes hands while a pull request of the old owner is still on its way to the broker: the owner sent
// it while its lease had a pull request's expiry left, then its host's path to the broker stalled and the owner froze
// (SIGSTOP) before it could notice anything. Its lease runs out, another instance takes the partition, and only then
// does the path heal: the old pull request reaches the broker, which counts its expiry from there and hands it the
// next messages, round robin with the new owner's requests — into the frozen process. The new owner never receives
// them and must hold the later events of their aggregate back until the broker delivers them again.
import { createClient } from '@libsql/client';
import { jetstreamManager } from '@nats-io/jetstream';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { partitionOf } from '../../src/outbox/partition.ts';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { createTempDir } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { natsClient, startNats } from '../support/nats.ts';
import { FIXTURE_ENTRY, freePort, freeze, runtimeCommand, spawnChild, withOutput } from '../support/process.ts';
import { publishTogether } from '../support/recording-subscriber.ts';
import { startStallableHop } from '../support/stallable-hop.ts';
import { publishRaw } from '../support/stream.ts';
import { durable, partitionsOf, splitEvenly, STREAM, type Instance } from '../support/audit-instances.ts';

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

const TTL_MS = 1500;
const ACK_WAIT_MS = 6000;

describe('lost deliveries - a hand-over while a pull request of the frozen old owner is delayed in the network', () => {
  it('applies every event of an aggregate once and in order when the old owner’s late pull request takes some of them from the new owner', {
    timeout: 60_000,
  }, async () => {
    const nats = await startNats();
    const tmp = createTempDir();
    cleanups.push(
      () => tmp[Symbol.dispose](),
      () => nats[Symbol.asyncDispose](),
    );
    const hop = await startStallableHop(nats.port);
    cleanups.push(() => hop.close());
    const env = {
      DATABASE_URL: `file:${join(tmp.dir, 'app.db')}`,
      CONSUMER_DATABASE_URL_TEMPLATE: `file:${join(tmp.dir, '{name}.db')}`,
      LOG_LEVEL: 'info',
      ROLES: 'consumers',
      CONSUMERS: 'audit',
      CONSUMER_PARTITIONED: 'true',
      RELAY_LEASE_TTL_MS: String(TTL_MS),
      CONSUMER_ACK_WAIT_MS: String(ACK_WAIT_MS),
      CONSUMER_BATCH: '20',
      DATABASE_BUSY_TIMEOUT_MS: '30000',
      RELAY_BACKOFF_BASE_MS: '100',
      RELAY_MAX_BACKOFF_MS: '1000',
    };
    const instance = async (name: string, natsUrl: string): Promise<Instance> => {
      const port = await freePort();
      const { cmd, args } = runtimeCommand('node', FIXTURE_ENTRY);
      const child = spawnChild(cmd, args, { ...env, NATS_URL: natsUrl, INSTANCE_NAME: name, METRICS_PORT: String(port) });
      cleanups.push(() => child.kill9());
      return { ...child, url: `http://127.0.0.1:${port}` };
    };
    const nc = await natsClient(nats.url);
    cleanups.push(() => nc.close());
    const jsm = await jetstreamManager(nc);
    const db = createClient({ url: `file:${join(tmp.dir, 'audit.db')}` });
    cleanups.push(() => db.close());
    const count = async (sql: string) => Number((await db.execute(sql)).rows[0]![0]);

    const a = await instance('a', hop.url);
    const b = await instance('b', nats.url);
    const ofA = await splitEvenly(jsm, a, b);

    // twelve accounts in one of a's partitions, each opened (applied by a)
    const partition = ofA[0]!;
    const accounts: string[] = [];
    for (let n = 0; accounts.length < 12; n++)
      if (partitionOf('account', `stale-pull-${process.pid}-${n}`, 16) === partition) accounts.push(`stale-pull-${process.pid}-${n}`);
    for (const accountId of accounts) {
      const e = openedEvent({ accountId });
      await publishRaw(nc, STREAM, e, e.eventId);
    }
    await eventually(async () => (await count('SELECT count(*) FROM audit_log')) === accounts.length, { what: 'the openings applied by a' });

    // the path stalls; once a pull request of a on that partition is kept in the network, a freezes
    const subject = `$JS.API.CONSUMER.MSG.NEXT.${STREAM.name}.${durable(partition)}`;
    hop.stallOn(subject);
    await withOutput(
      a,
      eventually(async () => hop.keptIncludes(subject), { timeoutMs: 5000, what: "a's pull request kept in the network" }),
    );
    await freeze(a.proc.pid!);
    cleanups.push(() => a.proc.kill('SIGCONT'));

    await withOutput(
      b,
      eventually(async () => (await partitionsOf(b))?.length === 16, { timeoutMs: 10_000, everyMs: 50, what: 'b holding every partition' }),
    );
    await eventually(async () => (await jsm.consumers.info(STREAM.name, durable(partition))).num_waiting > 0, { what: 'b pulling the partition' });
    // the path heals: a's pull request reaches the broker (still connected, frozen), next to b's
    hop.heal();
    await eventually(async () => (await jsm.consumers.info(STREAM.name, durable(partition))).num_waiting > 1, { what: "a's late pull request waiting" });
    const later = [2, 3, 4].flatMap((version) => accounts.map((accountId) => creditedEvent({ accountId, version })));
    await publishTogether(nc, STREAM.prefix, later);

    const total = accounts.length * 4;
    await withOutput(
      b,
      eventually(async () => (await count('SELECT count(*) FROM audit_log')) >= total, {
        timeoutMs: 3 * ACK_WAIT_MS,
        everyMs: 100,
        what: 'every event applied',
      }),
    );
    await new Promise((r) => setTimeout(r, 500));
    expect(await count('SELECT count(*) FROM audit_log')).toBe(total);
    expect(await count('SELECT count(*) FROM inbox')).toBe(total);
    const applied = new Map<string, number[]>();
    for (const r of (await db.execute('SELECT account_id, aggregate_version FROM audit_log ORDER BY n')).rows)
      applied.set(String(r.account_id), [...(applied.get(String(r.account_id)) ?? []), Number(r.aggregate_version)]);
    const disorder = accounts.filter((id) => applied.get(id)?.join() !== '1,2,3,4').map((id) => `${id}: ${applied.get(id)?.join(' → ')}`);
    expect(disorder, 'accounts whose events were applied out of order').toEqual([]);
    // some of the later events did go to the frozen process: the broker delivered them again, to b
    const deliveries = (await jsm.consumers.info(STREAM.name, durable(partition))).delivered.consumer_seq;
    expect(deliveries).toBeGreaterThan(total);
    expect((await b.stop('SIGTERM')).code).toBe(0);
  });
});
