import { sqlOf, type Database, type Tx } from './open-database.ts';
import { DatabaseBusyError, isBusyError } from './busy.ts';

/** Runs write transactions one at a time for this process, grouping queued ones into a single commit. */
export type Writer = {
  /**
   * Runs `fn` inside a write transaction (BEGIN IMMEDIATE) and resolves with its result only after the commit.
   * `fn` must do database work only and may run more than once: it may share the transaction with other queued
   * writes, and when one of them throws, the group is rolled back and run again with each write in its own
   * savepoint, so a throw rolls back `fn`'s own work and rejects only its own promise.
   */
  write<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  /** Resolves once everything queued so far has committed or failed. */
  idle(): Promise<void>;
};

type Job = { fn: (tx: Tx) => Promise<unknown>; resolve: (v: unknown) => void; reject: (e: unknown) => void };
type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };

/**
 * Runs `fn` after the event loop's current turn, so requests whose bytes arrived together are all parsed and
 * queued before the first transaction starts (a microtask would commit the first one alone). setImmediate where
 * the runtime has it, a zero timeout elsewhere (Workers).
 */
const nextTurn: (fn: () => void) => void =
  typeof setImmediate === 'function' ? (fn) => void setImmediate(fn) : (fn) => void setTimeout(fn, 0);

/**
 * One write queue per database per process. @libsql/client's local driver is synchronous, so a second
 * in-process BEGIN IMMEDIATE while one is open would block the event loop until the busy timeout; the queue
 * avoids that, and it is where group commit happens: up to `maxGroup` queued writes share one fsync.
 */
export function createWriter(db: Database, options: { maxGroup?: number } = {}): Writer {
  const maxGroup = options.maxGroup ?? 64;
  const queue: Job[] = [];
  let draining: Promise<void> | undefined;

  /**
   * One transaction for the group. Optimistically the jobs run back to back; if one throws, the whole attempt
   * rolls back and the group runs again with each job in its own savepoint, so only the thrower fails. Savepoints
   * cost two statements per job, which the common, failure-free group does not pay.
   */
  async function runGroup(group: Job[], isolated = false): Promise<void> {
    const outcomes: Outcome[] = [];
    let jobThrew = false;
    try {
      await db.transaction(async (tx) => {
        const raw = sqlOf(tx as Tx);
        for (const job of group) {
          if (!isolated) {
            try {
              outcomes.push({ ok: true, value: await job.fn(tx as Tx) });
            } catch (error) {
              jobThrew = true;
              outcomes.push({ ok: false, error });
              throw error;
            }
            continue;
          }
          await raw.execute('SAVEPOINT writer_job');
          try {
            outcomes.push({ ok: true, value: await job.fn(tx as Tx) });
            await raw.execute('RELEASE writer_job');
          } catch (error) {
            await raw.execute('ROLLBACK TO writer_job');
            await raw.execute('RELEASE writer_job');
            outcomes.push({ ok: false, error });
          }
        }
      });
    } catch (error) {
      if (jobThrew && group.length > 1) return runGroup(group, true);
      const busy = isBusyError(error);
      if (busy) dropPoisonedConnections(db);
      const wrapped = busy ? new DatabaseBusyError(error) : error;
      group.forEach((job, i) => {
        const own = outcomes[i];
        job.reject(own && !own.ok ? own.error : wrapped);
      });
      return;
    }
    group.forEach((job, i) => {
      const o = outcomes[i]!;
      if (o.ok) job.resolve(o.value);
      else job.reject(o.error);
    });
  }

  async function drain(): Promise<void> {
    while (queue.length > 0) await runGroup(queue.splice(0, maxGroup));
    draining = undefined;
  }

  return {
    write<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
      return new Promise<T>((resolve, reject) => {
        queue.push({ fn, resolve: resolve as (v: unknown) => void, reject });
        draining ??= new Promise<void>((resolve) => nextTurn(() => resolve(drain())));
      });
    },
    async idle() {
      while (draining) await draining;
    },
  };
}

/**
 * @libsql/client 0.18 leaves a statement that failed with SQLITE_BUSY (here: the BEGIN IMMEDIATE that waited out the
 * busy timeout) un-reset on its pooled connection. Until GC finalizes it, every COMMIT on that connection fails with
 * "cannot commit transaction - SQL statements in progress", and an autocommit write on it silently stays uncommitted
 * while holding the write lock. Reopening the pool closes that connection; the next write gets a fresh one.
 */
function dropPoisonedConnections(db: Database): void {
  try {
    db.$client.reconnect();
  } catch {
    // A client that cannot reconnect (closed, remote) has no pooled connection to drop.
  }
}
