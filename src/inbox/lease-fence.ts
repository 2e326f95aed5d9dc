import { sqlOf, type SqlRunner } from '../db/open-database.ts';
import type { Writer } from '../db/writer.ts';
import type { InboxResult } from './handle-once.ts';
import type { InboxMessage } from './inbox-message.ts';

/** A partition's lease as one run of its consumer holds it: the epoch its acquisition gave it. */
export type HeldLease = { scope: string; partition: number; owner: string; epoch: number };

/** A write found its partition's lease taken over (or given up) since its run began: nothing of it committed. */
export class LeaseFencedError extends Error {
  override readonly name = 'LeaseFencedError';
}

/** Throws LeaseFencedError unless `lease` is still its owner's at its epoch, read in `tx` (the caller's write transaction). */
export async function assertLeaseHeld(tx: SqlRunner, lease: HeldLease): Promise<void> {
  const rs = await tx.execute({
    sql: 'SELECT 1 FROM leases WHERE scope = ?1 AND partition = ?2 AND owner = ?3 AND epoch = ?4',
    args: [lease.scope, lease.partition, lease.owner, lease.epoch],
  });
  if (rs.rows.length === 0)
    throw new LeaseFencedError(`the lease of ${lease.scope} partition ${lease.partition} (epoch ${lease.epoch}) is no longer ${lease.owner}'s`);
}

/**
 * `writer`, each of whose writes first checks, in its own transaction, that `lease` still holds (assertLeaseHeld),
 * and rejects with LeaseFencedError, rolling back only that write, once it does not. The check and the commit are one
 * write transaction (BEGIN IMMEDIATE): no other instance can take the lease in between.
 */
export function fencedWriter(writer: Writer, lease: HeldLease): Writer {
  return {
    write: (fn, options) =>
      writer.write(async (tx) => {
        await assertLeaseHeld(sqlOf(tx), lease);
        return fn(tx);
      }, options),
    idle: () => writer.idle(),
  };
}

/**
 * `processBatch` for a runner whose writes are fenced: when a write fails with LeaseFencedError (nothing of it
 * committed), calls `fenced` (which stops the run) and answers every message `deferred`, so the run hands them all
 * back, in stream order, instead of retrying a write that can no longer commit.
 */
export function handBackWhenFenced(processBatch: (msgs: InboxMessage[]) => Promise<InboxResult[]>, fenced: (error: LeaseFencedError) => void) {
  return async (msgs: InboxMessage[]): Promise<InboxResult[]> => {
    try {
      return await processBatch(msgs);
    } catch (error) {
      if (!(error instanceof LeaseFencedError)) throw error;
      fenced(error);
      return msgs.map((m) => ({ outcome: 'deferred', eventId: m.fallbackId }));
    }
  };
}
