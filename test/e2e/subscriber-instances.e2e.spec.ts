// Two real processes of one subscriber (the fixture's `audit`, ROLES=consumers, CONSUMER_PARTITIONED=true) share its
// partitions under a stream of events. One is SIGKILLed mid-batch (committed, not acknowledged), or paused (SIGSTOP)
// past its lease while it holds messages: the other takes its partitions over, and every event takes effect once,
// each aggregate's in order.
import { createClient, type Client } from '@libsql/client';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { createTempDir } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { natsClient, startNats } from '../support/nats.ts';
import { FAULT_ENTRY, FIXTURE_ENTRY, freePort, freeze, runtimeCommand, spawnChild, withOutput } from '../support/process.ts';
import { publishRaw } from '../support/stream.ts';
import { startWriteLockHolder } from '../support/write-lock.ts';
import { durable, PARTITIONS, partitionsOf, splitEvenly, STREAM, type Instance } from '../support/audit-instances.ts';

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

const TTL_MS = 1500;

/** A broker, a directory for the databases, and a way to start instances of `audit` alone over them. */
async function setup() {
  const nats = await startNats();
  const tmp = createTempDir();
  cleanups.push(
    () => tmp[Symbol.dispose](),
    () => nats[Symbol.asyncDispose](),
  );
  const auditUrl = `file:${join(tmp.dir, 'audit.db')}`;
  const env = {
    DATABASE_URL: `file:${join(tmp.dir, 'app.db')}`,
    CONSUMER_DATABASE_URL_TEMPLATE: `file:${join(tmp.dir, '{name}.db')}`,
    NATS_URL: nats.url,
    LOG_LEVEL: 'warn',
    CONSUMER_PARTITIONED: 'true',
    RELAY_LEASE_TTL_MS: String(TTL_MS),
    // what a dead or paused instance held comes back soon; the new owner applies nothing newer of theirs before
    CONSUMER_ACK_WAIT_MS: '2000',
    CONSUMER_BATCH: '20',
    DATABASE_BUSY_TIMEOUT_MS: '30000',
    RELAY_BACKOFF_BASE_MS: '100',
    RELAY_MAX_BACKOFF_MS: '1000',
  };
  /** An instance serving /ready on a port of its own; with a fault, the fault entry. */
  const instance = async (name: string, fault?: string): Promise<Instance> => {
    const port = await freePort();
    const { cmd, args } = runtimeCommand('node', fault ? FAULT_ENTRY : FIXTURE_ENTRY);
    const entryArgs = fault ? ['--fixture', 'consume', 'audit'] : [];
    const child = spawnChild(cmd, [...args, ...entryArgs], {
      ...env,
      ROLES: 'consumers',
      CONSUMERS: 'audit',
      INSTANCE_NAME: name,
      METRICS_PORT: String(port),
      ...(fault ? { HONO_OUTBOX_TEST_FAULT: fault } : {}),
    });
    cleanups.push(() => child.kill9());
    return { ...child, url: `http://127.0.0.1:${port}` };
  };
  const nc = await natsClient(nats.url);
  cleanups.push(() => nc.close());
  const db = createClient({ url: auditUrl });
  cleanups.push(() => db.close());
  return { nc, jsm: await jetstreamManager(nc), db, auditUrl, dir: tmp.dir, instance };
}

/** How many lines `file` holds (0 while it does not exist). */
function linesOf(file: string): number {
  return existsSync(file) ? readFileSync(file, 'utf8').split('\n').length - 1 : 0;
}

/** Publishes versions `from` … `to` of every account, a slice of 30 accounts at a time, `pauseMs` apart. */
async function publishVersions(nc: NatsConnection, accounts: readonly string[], from: number, to: number, pauseMs = 0): Promise<void> {
  for (let version = from; version <= to; version++)
    for (let at = 0; at < accounts.length; at += 30) {
      await Promise.all(
        accounts.slice(at, at + 30).map((accountId) => {
          const e = version === 1 ? openedEvent({ accountId }) : creditedEvent({ accountId, version });
          return publishRaw(nc, STREAM, e, e.eventId);
        }),
      );
      if (pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs));
    }
}

const ackPending = async (jsm: JetStreamManager, partitions: readonly number[]) => {
  let n = 0;
  for (const k of partitions) n += (await jsm.consumers.info(STREAM.name, durable(k))).num_ack_pending;
  return n;
};

/** Waits for every version of every account, then checks each took effect once and each account's in order. */
async function expectAllOnceInOrder(db: Client, accounts: readonly string[], versions: number, waiting: Instance): Promise<void> {
  const total = accounts.length * versions;
  const count = async (sql: string) => Number((await db.execute(sql)).rows[0]![0]);
  await withOutput(
    waiting,
    eventually(async () => (await count('SELECT count(*) FROM inbox')) >= total, { timeoutMs: 30_000, what: `${total} events applied` }),
  );
  expect(await count('SELECT count(*) FROM inbox')).toBe(total);
  expect(await count('SELECT count(*) FROM audit_log')).toBe(total);
  const applied = new Map<string, number[]>();
  for (const r of (await db.execute('SELECT account_id, aggregate_version FROM audit_log ORDER BY n')).rows)
    applied.set(String(r.account_id), [...(applied.get(String(r.account_id)) ?? []), Number(r.aggregate_version)]);
  const expected = Array.from({ length: versions }, (_, i) => i + 1);
  for (const account of accounts) expect(applied.get(account), account).toEqual(expected);
}

const accountsNamed = (tag: string) => Array.from({ length: 120 }, (_, i) => `${tag}-${process.pid}-${i}`);

describe('subscriber instances - processes', () => {
  it('one of two partitioned instances SIGKILLed mid-batch: the survivor takes its partitions within the lease TTL and a pass, and every event takes effect once, in order per aggregate', async () => {
    const { nc, jsm, db, instance } = await setup();
    // `a` dies right after its 150th commit, before acknowledging that batch (kill-after-commit)
    const a = await instance('a', 'kill-after-commit:150');
    const b = await instance('b');
    await splitEvenly(jsm, a, b);

    const accounts = accountsNamed('kill');
    const publishing = publishVersions(nc, accounts, 1, 5, 60);
    const exit = await withOutput(
      a,
      Promise.race([a.exited, new Promise<never>((_, reject) => setTimeout(() => reject(new Error('a was not killed')), 30_000))]),
    );
    const killedAt = Date.now();
    expect(exit.signal).toBe('SIGKILL');
    // it held messages: committed or pulled, never acknowledged
    expect(
      await ackPending(
        jsm,
        Array.from({ length: PARTITIONS }, (_, k) => k),
      ),
    ).toBeGreaterThan(0);

    await withOutput(
      b,
      eventually(async () => (await partitionsOf(b))?.length === PARTITIONS, { timeoutMs: 10_000, everyMs: 50, what: 'b holding every partition' }),
    );
    // a's leases run out TTL_MS after its last renewal (a third of the TTL at most before the kill), then b's next claim
    expect(Date.now() - killedAt).toBeLessThan(TTL_MS + 1000);
    await publishing;

    await expectAllOnceInOrder(db, accounts, 5, b);
    await eventually(
      async () =>
        (await ackPending(
          jsm,
          Array.from({ length: PARTITIONS }, (_, k) => k),
        )) === 0,
      { what: 'every message acknowledged' },
    );
    // what `a` committed without acknowledging came back to b (after its ack_wait: b did not wait for it to apply
    // the later events of those aggregates, its inbox already holds it), and the inbox recognised it
    const metrics = await (await fetch(`${b.url}/metrics`)).text();
    expect(Number(/^inbox_duplicates_total\{consumer="audit"\} (\d+)$/m.exec(metrics)?.[1])).toBeGreaterThan(0);
    expect((await b.stop('SIGTERM')).code).toBe(0);
  });

  it('an instance paused (SIGSTOP) past its lease in the middle of a write: the other takes its partitions and applies what it held in order; resumed, its write is fenced off and handed back, and it rejoins', async () => {
    const { nc, jsm, db, auditUrl, dir, instance } = await setup();
    // `a` appends a line to `writes` as each of its writes is queued
    const writes = join(dir, 'a-writes');
    const a = await instance('a', `announce-write:${writes}`);
    const b = await instance('b');
    const ofA = await splitEvenly(jsm, a, b);
    const accounts = accountsNamed('pause');
    await publishVersions(nc, accounts, 1, 1);

    // both hold their share of version 2, their writes queued behind another process's lock; then `a` freezes
    const holder = await startWriteLockHolder(auditUrl);
    cleanups.push(() => holder[Symbol.asyncDispose]());
    await holder.lock();
    const writesBefore = linesOf(writes);
    await publishVersions(nc, accounts, 2, 2);
    await eventually(async () => (await ackPending(jsm, ofA)) > 0, { what: 'a holding messages' });
    // holding them is not yet writing them: a check of the stream may come first, and a freeze there would leave
    // nothing to fence off
    await eventually(async () => linesOf(writes) > writesBefore, { what: 'a write of a queued behind the lock' });
    await freeze(a.proc.pid!);
    cleanups.push(() => a.proc.kill('SIGCONT'));
    await holder.release();

    await withOutput(
      b,
      eventually(async () => (await partitionsOf(b))?.length === PARTITIONS, { timeoutMs: 10_000, what: 'b holding every partition' }),
    );
    await publishVersions(nc, accounts, 3, 4);
    await expectAllOnceInOrder(db, accounts, 4, b);

    a.proc.kill('SIGCONT');
    await withOutput(
      a,
      eventually(async () => /its lease was taken over during a write/.test(a.output()), { what: 'a write of a fenced off' }),
    );
    await withOutput(
      a,
      eventually(async () => (await partitionsOf(a))?.length === 8, { timeoutMs: 15_000, what: 'a holding eight partitions again' }),
    );
    await publishVersions(nc, accounts, 5, 5);
    await expectAllOnceInOrder(db, accounts, 5, a);
    expect((await a.stop('SIGTERM')).code).toBe(0);
    expect((await b.stop('SIGTERM')).code).toBe(0);
  });
});
