// Three partitioned instances of `audit` as processes: `a` is frozen (SIGSTOP) with a write queued behind another
// process's write lock; the lock is held past the lease TTL (every instance's renewal waits behind it) while a third
// instance `c` joins; `c` is SIGKILLed during the hand-over that follows; `a` resumes after several ack_waits; a
// backlog far larger than the batch flows all along. Every event must take effect once, each account's in order.
import { join } from 'node:path';
import { afterEach, describe, it } from 'vitest';
import { eventually } from '../support/eventually.ts';
import { freeze } from '../support/process.ts';
import { startWriteLockHolder } from '../support/write-lock.ts';
import {
  accountsNamed,
  AUDIT_LEASE_TTL_MS,
  expectAllOnceInOrder,
  linesOf,
  publishVersions,
  splitEvenly,
  startAuditInstances,
} from '../support/audit-instances.ts';

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('subscriber instances - hostile hand-overs', () => {
  it('a frozen instance with a write queued behind a lock held past the lease TTL while a third instance joins and is SIGKILLed during the hand-over: every event takes effect once, each account in order', async () => {
    const { nc, jsm, db, auditUrl, dir, instance } = await startAuditInstances(cleanups);
    const writes = join(dir, 'a-writes');
    const a = await instance('a', `announce-write:${writes}`);
    const b = await instance('b');
    await splitEvenly(jsm, a, b);
    const accounts = accountsNamed('chaos');
    await publishVersions(nc, accounts, 1, 1);

    const holder = await startWriteLockHolder(auditUrl);
    cleanups.push(() => holder[Symbol.asyncDispose]());
    await holder.lock();
    const writesBefore = linesOf(writes);
    const publishing2 = publishVersions(nc, accounts, 2, 3);
    await eventually(async () => linesOf(writes) > writesBefore, { timeoutMs: 20_000, what: 'a write of a queued behind the lock' });
    await freeze(a.proc.pid!);
    cleanups.push(() => a.proc.kill('SIGCONT'));
    const c = await instance('c');
    // every renewal waits behind the lock for longer than the TTL
    await sleep(3 * AUDIT_LEASE_TTL_MS);
    await holder.release();
    await publishing2;
    const publishing = publishVersions(nc, accounts, 4, 8, 40);
    await sleep(1200);
    await c.kill9();
    await sleep(2500);
    a.proc.kill('SIGCONT');
    await publishing;
    await expectAllOnceInOrder(db, accounts, 8, b, { timeoutMs: 90_000, settleMs: 3000 });
  }, 240_000);
});
