// Two real processes of one subscriber (the fixture's `audit`, ROLES=consumers, CONSUMER_PARTITIONED=true) share its
// partitions under a stream of events. One is SIGKILLed mid-batch (committed, not acknowledged), or paused (SIGSTOP)
// past its lease while it holds messages: the other takes its partitions over, and every event takes effect once,
// each aggregate's in order.
import type { JetStreamManager } from '@nats-io/jetstream';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { eventually } from '../support/eventually.ts';
import { freeze, withOutput } from '../support/process.ts';
import { startWriteLockHolder } from '../support/write-lock.ts';
import {
  accountsNamed,
  AUDIT_LEASE_TTL_MS,
  durable,
  expectAllOnceInOrder,
  linesOf,
  PARTITIONS,
  partitionsOf,
  publishVersions,
  splitEvenly,
  STREAM,
  startAuditInstances,
} from '../support/audit-instances.ts';

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

const TTL_MS = AUDIT_LEASE_TTL_MS;

const ackPending = async (jsm: JetStreamManager, partitions: readonly number[]) => {
  let n = 0;
  for (const k of partitions) n += (await jsm.consumers.info(STREAM.name, durable(k))).num_ack_pending;
  return n;
};

describe('subscriber instances - processes', () => {
  it('one of two partitioned instances SIGKILLed mid-batch: the survivor takes its partitions within the lease TTL and a pass, and every event takes effect once, in order per aggregate', async () => {
    const { nc, jsm, db, instance } = await startAuditInstances(cleanups);
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
    const { nc, jsm, db, auditUrl, dir, instance } = await startAuditInstances(cleanups);
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
