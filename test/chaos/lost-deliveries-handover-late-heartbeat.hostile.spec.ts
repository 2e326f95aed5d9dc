// A partition changes hands while the old owner still holds an unacknowledged message of an aggregate: the new owner
// awaits it (createMissingDeliveries) and holds the aggregate's later events back until the broker delivers it again.
// Here the old owner's network path to the broker stalls (a partition of its host, its TCP segments retransmitted
// later): two progress heartbeats (+WPI) it sent while it still held the lease sit in the network, the owner dies
// (SIGKILL), its lease runs out, another instance takes the partition, and the heartbeats reach the broker only
// after that, each shortly before the message's ack_wait ran out. The broker keeps the message for 2 × ack_wait more,
// longer than the new owner's wait (1.5 × ack_wait + 1 s of pulling from its start). One late heartbeat is enough
// with a longer ack_wait (20 s: it takes 0.25 × ack_wait > the hand-over time + 1 s).
import { createClient } from '@libsql/client';
import { jetstreamManager } from '@nats-io/jetstream';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { partitionOf } from '../../src/outbox/partition.ts';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { createTempDir } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { natsClient, startNats } from '../support/nats.ts';
import { FIXTURE_ENTRY, freePort, runtimeCommand, spawnChild, withOutput } from '../support/process.ts';
import { startStallableHop } from '../support/stallable-hop.ts';
import { publishRaw } from '../support/stream.ts';
import { durable, partitionsOf, splitEvenly, STREAM, type Instance } from '../support/audit-instances.ts';

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

// a lease TTL that lets `a` go on for two heartbeats after its path stalled before it sits out (createSitOut)
const TTL_MS = 3000;
const ACK_WAIT_MS = 10_000;
const HEARTBEAT_MS = ACK_WAIT_MS / 4; // createConsumerRunner: a progress heartbeat every quarter of ack_wait

describe('lost deliveries - a hand-over while the old owner’s keep-alive is delayed in the network', () => {
  it('applies an aggregate’s earlier event before its later one when the killed old owner’s last progress heartbeat reaches the broker late, after the new owner took the partition', {
    timeout: 90_000,
  }, async () => {
    const nats = await startNats();
    const tmp = createTempDir();
    cleanups.push(
      () => tmp[Symbol.dispose](),
      () => nats[Symbol.asyncDispose](),
    );
    const hop = await startStallableHop(nats.port);
    cleanups.push(() => hop.close());
    const auditUrl = `file:${join(tmp.dir, 'audit.db')}`;
    const env = {
      DATABASE_URL: `file:${join(tmp.dir, 'app.db')}`,
      CONSUMER_DATABASE_URL_TEMPLATE: `file:${join(tmp.dir, '{name}.db')}`,
      LOG_LEVEL: 'info',
      ROLES: 'consumers',
      CONSUMERS: 'audit',
      CONSUMER_PARTITIONED: 'true',
      RELAY_LEASE_TTL_MS: String(TTL_MS),
      CONSUMER_ACK_WAIT_MS: String(ACK_WAIT_MS),
      CONSUMER_MAX_DELIVER: '1000',
      CONSUMER_BATCH: '20',
      DATABASE_BUSY_TIMEOUT_MS: '30000',
      RELAY_BACKOFF_BASE_MS: '1000',
      RELAY_MAX_BACKOFF_MS: '2000',
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
    const db = createClient({ url: auditUrl });
    cleanups.push(() => db.close());

    // `a` reaches the broker through the hop, `b` directly; they split the 16 partitions
    const a = await instance('a', hop.url);
    const b = await instance('b', nats.url);
    const ofA = await splitEvenly(jsm, a, b);

    // an account in one of a's partitions; its opening fails for now (a trigger), so `a` holds it, retrying
    let n = 0;
    while (!ofA.includes(partitionOf('account', `late-hb-${process.pid}-${n}`, 16))) n++;
    const account = `late-hb-${process.pid}-${n}`;
    const partition = partitionOf('account', account, 16);
    const [v1, v2] = [openedEvent({ accountId: account }), creditedEvent({ accountId: account, version: 2 })];
    await db.execute(`CREATE TRIGGER hold_opening BEFORE INSERT ON audit_log WHEN NEW.event_id = '${v1.eventId}' BEGIN SELECT RAISE(ABORT, 'not yet'); END`);
    await publishRaw(nc, STREAM, v1, v1.eventId);
    await eventually(async () => (await jsm.consumers.info(STREAM.name, durable(partition))).num_ack_pending === 1, { what: 'a holding v1' });

    // `a` keeps v1 alive; once one heartbeat went through, the path stalls on the next one
    const before = hop.sentWpi.length;
    const firstBeat = await withOutput(
      a,
      eventually(async () => hop.sentWpi[before], { timeoutMs: HEARTBEAT_MS + 2000, what: "a's heartbeat" }),
    );
    hop.stallOn('+WPI');
    // the next two heartbeats (sent while `a` holds the lease) are in the network; `a` dies
    await withOutput(
      a,
      eventually(async () => hop.keptWpi() >= 2, { timeoutMs: HEARTBEAT_MS + 3000, what: 'two heartbeats kept in the network' }),
    );
    await a.kill9();
    const killedAt = Date.now();
    await db.execute('DROP TRIGGER hold_opening');

    await withOutput(
      b,
      eventually(async () => (await partitionsOf(b))?.length === 16, { timeoutMs: 10_000, everyMs: 50, what: 'b holding every partition' }),
    );
    await publishRaw(nc, STREAM, v2, v2.eventId);
    await eventually(async () => (await jsm.consumers.info(STREAM.name, durable(partition))).num_ack_pending === 2, { what: 'b holding v2' });

    // the path delivers the first kept heartbeat just before v1's ack_wait (from the last heartbeat the broker got)
    // runs out, and the second, with everything after it, just before that renewed ack_wait runs out
    const count = async () => Number((await db.execute('SELECT count(*) FROM audit_log')).rows[0]![0]);
    await new Promise((r) => setTimeout(r, firstBeat + ACK_WAIT_MS - 600 - Date.now()));
    expect(await count()).toBe(0);
    hop.deliverThroughWpi(1);
    const firstHealAt = Date.now();
    await new Promise((r) => setTimeout(r, firstHealAt + ACK_WAIT_MS - 600 - Date.now()));
    const beforeSecond = await count();
    hop.heal();
    const healedAt = Date.now();

    await withOutput(
      b,
      eventually(async () => (await count()) === 2, {
        timeoutMs: ACK_WAIT_MS + 10_000,
        everyMs: 100,
        what: 'v1 and v2 applied',
      }),
    );
    const versions = (await db.execute(`SELECT aggregate_version FROM audit_log WHERE account_id = '${account}' ORDER BY n`)).rows.map((r) =>
      Number(r.aggregate_version),
    );
    const timing = {
      killedAfterBeatMs: killedAt - firstBeat,
      firstHealAfterBeatMs: firstHealAt - firstBeat,
      healedAfterBeatMs: healedAt - firstBeat,
      appliedBeforeSecondHeal: beforeSecond,
      appliedAfterBeatMs: Date.now() - firstBeat,
    };
    expect(
      versions,
      `${JSON.stringify(timing)}\n${b
        .output()
        .split('\n')
        .filter((l) => /waiting for messages|stopped waiting|still waiting/.test(l))
        .join('\n')}`,
    ).toEqual([1, 2]);
    expect((await b.stop('SIGTERM')).code).toBe(0);
  });
});
