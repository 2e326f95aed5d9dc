import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import { sqlOf, type Database, type Tx } from './open-database.ts';
import { DatabaseBusyError, isBusyError } from './busy.ts';
import { sleep } from '../worker/sleep.ts';
import { busyBudgetOf, dropPoisonedConnections, HOLD_BEFORE_YIELD_MS, nextBusySleep, SATURATED_SHARE, writeLockBusy, YIELD_MS } from './write-lock.ts';

/** Runs write transactions one at a time for this process, grouping queued ones into a single commit. */
export type Writer = {
  /**
   * Runs `fn` inside a write transaction (BEGIN IMMEDIATE) and resolves with its result only after the commit.
   * `fn` must do database work only and may run more than once: it shares the transaction with other queued
   * writes, and when one of them throws, the group is rolled back and run again with each write in its own
   * savepoint, so a throw rolls back `fn`'s own work and rejects only its own promise. Expected outcomes (not
   * found, conflict) should be returned as values: a throw costs the whole group a rollback and a second run.
   * While another process holds the write lock, rejects with DatabaseBusyError once `fn` has waited the busy budget.
   * With `urgent`, `fn` goes to the head of the queue (a lease renewal must not wait behind a burst of commands).
   */
  write<T>(fn: (tx: Tx) => Promise<T>, options?: { urgent?: boolean }): Promise<T>;
  /** Resolves once everything queued so far has committed or failed. */
  idle(): Promise<void>;
};

type Job = { fn: (tx: Tx) => Promise<unknown>; resolve: (v: unknown) => void; reject: (e: unknown) => void; deadline: number };
type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };
/** How a group attempt ended: it ran (every job settled), or another process held the write lock (no job ran). */
type GroupRun = { ran: true } | { ran: false; busy: unknown };

/**
 * Runs `fn` after the event loop's current turn, so requests whose bytes arrived together are all parsed and
 * queued before the first transaction starts (a microtask would commit the first one alone). setImmediate where
 * the runtime has it, a zero timeout elsewhere (Workers).
 */
const nextTurn: (fn: () => void) => void = typeof setImmediate === 'function' ? (fn) => void setImmediate(fn) : (fn) => void setTimeout(fn, 0);

/**
 * One write queue per database per process. @libsql/client's local driver is synchronous, so a second
 * in-process BEGIN IMMEDIATE while one is open would block the event loop until the busy timeout; the queue
 * avoids that, and it is where group commit happens: up to `maxGroup` queued writes share one fsync.
 * While another process holds the write lock, the queue waits asynchronously (short probes, growing sleeps) and
 * fails each job with DatabaseBusyError when its own `busyTimeoutMs` (the client's busy budget by default) runs out.
 * On a local file, a writer that keeps the lock nearly all the time (SATURATED_SHARE of it, over HOLD_BEFORE_YIELD_MS
 * held) leaves it free for YIELD_MS before its next group, so other processes' writers waiting for it get in: ≈ 3.5 %
 * of a saturated writer's time; a writer that leaves gaps of its own never pauses.
 */
export function createWriter(db: Database, options: { maxGroup?: number; busyTimeoutMs?: number } = {}): Writer {
  const maxGroup = options.maxGroup ?? 64;
  const budgetMs = options.busyTimeoutMs ?? busyBudgetOf(db.$client);
  const queue: Job[] = [];
  let draining: Promise<void> | undefined;
  const yields = db.$client.protocol === 'file';
  /** When the last group let go of the write lock; since when, and for how long, the groups held it with no gap of YIELD_MS. */
  let releasedAt = Number.NEGATIVE_INFINITY;
  let stretchFrom = 0;
  let heldMs = 0;

  /**
   * Leaves the lock free for YIELD_MS (counting the gap since the last group) once the groups held it for
   * HOLD_BEFORE_YIELD_MS and for at least SATURATED_SHARE of the time since it was last free that long. A writer whose
   * own gaps leave the lock free more often lets other processes in anyway, and never pauses.
   */
  async function yieldIfSaturated(): Promise<void> {
    const now = Date.now();
    const gap = now - releasedAt;
    if (gap >= YIELD_MS || heldMs < HOLD_BEFORE_YIELD_MS) {
      if (gap >= YIELD_MS) [heldMs, stretchFrom] = [0, now];
      return;
    }
    if (heldMs >= SATURATED_SHARE * (now - stretchFrom)) await sleep(YIELD_MS - gap);
    [heldMs, stretchFrom] = [0, Date.now()];
  }

  /**
   * One transaction for the group. Optimistically the jobs run back to back; if one throws, the whole attempt
   * rolls back and the group runs again with each job in its own savepoint, so only the thrower fails. Savepoints
   * cost two statements per job, which the common, failure-free group does not pay.
   */
  async function runGroup(group: Job[], isolated = false): Promise<GroupRun> {
    const outcomes: Outcome[] = [];
    let began = false;
    let jobThrew = false;
    try {
      await db.transaction(async (tx) => {
        began = true;
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
      const busy = isBusyError(error);
      if (busy) dropPoisonedConnections(db.$client);
      // BEGIN itself found the lock taken (another process got it since the probe): nothing ran, wait and retry.
      if (!began && busy) return { ran: false, busy: error };
      if (jobThrew && group.length > 1) return runGroup(group, true);
      const wrapped = busy ? new DatabaseBusyError(error) : error;
      group.forEach((job, i) => {
        const own = outcomes[i];
        job.reject(own && !own.ok ? own.error : wrapped);
      });
      return { ran: true };
    }
    group.forEach((job, i) => {
      const o = outcomes[i]!;
      if (o.ok) job.resolve(o.value);
      else job.reject(o.error);
    });
    return { ran: true };
  }

  /** Rejects the jobs whose wait for another process's lock has run out; deadlines grow along the queue. */
  function expire(cause: unknown): void {
    const now = Date.now();
    let n = 0;
    while (n < queue.length && queue[n]!.deadline <= now) n++;
    for (const job of queue.splice(0, n)) job.reject(new DatabaseBusyError(cause));
  }

  async function drain(): Promise<void> {
    let wait = 0;
    try {
      while (queue.length > 0) {
        // Probing first keeps a taken lock from failing client.transaction()'s BEGIN, which would poison a connection.
        // Any other failure of the probe (a closed client, an I/O error) is left for the group's own BEGIN to report.
        if (yields) await yieldIfSaturated();
        const busy = await writeLockBusy(db.$client).catch(() => undefined);
        let run: GroupRun = { ran: false, busy };
        if (busy === undefined) {
          const group = queue.splice(0, maxGroup);
          const startedAt = Date.now();
          run = await runGroup(group);
          releasedAt = Date.now();
          heldMs += releasedAt - startedAt;
          if (!run.ran) queue.unshift(...group);
        }
        if (run.ran) {
          wait = 0;
          continue;
        }
        expire(run.busy);
        if (queue.length === 0) break;
        wait = nextBusySleep(wait);
        await sleep(Math.min(wait, queue[0]!.deadline - Date.now()));
        expire(run.busy);
      }
    } finally {
      // Synchronously after the last look at the queue: a write queued from here on starts a new drain.
      draining = undefined;
    }
  }

  return {
    write<T>(fn: (tx: Tx) => Promise<T>, options?: { urgent?: boolean }): Promise<T> {
      // each job runs in the trace context of its caller (its spans and log lines name its request), the queue in none
      const caller = context.active();
      const job = caller === ROOT_CONTEXT ? fn : (tx: Tx) => context.with(caller, fn, undefined, tx);
      return new Promise<T>((resolve, reject) => {
        const deadline = Date.now() + budgetMs;
        if (options?.urgent) {
          // deadlines must not decrease along the queue (expire() reads them from the head)
          queue.unshift({ fn: job, resolve: resolve as (v: unknown) => void, reject, deadline: Math.min(deadline, queue[0]?.deadline ?? deadline) });
        } else queue.push({ fn: job, resolve: resolve as (v: unknown) => void, reject, deadline });
        draining ??= new Promise<void>((resolve) => nextTurn(() => resolve(context.with(ROOT_CONTEXT, drain))));
      });
    },
    async idle() {
      while (draining) await draining;
    },
  };
}
