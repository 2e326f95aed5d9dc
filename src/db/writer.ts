import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import { sqlOf, type Database, type Tx } from './open-database.ts';
import { DatabaseBusyError, isBusyError } from './busy.ts';
import { sleep } from '../worker/sleep.ts';
import {
  busyBudgetOf,
  dropPoisonedConnections,
  nextBusySleep,
  SATURATED_SHARE,
  HEAVY_HELD_SHARE,
  writeLockBusy,
  YIELD_MS,
  YIELD_WINDOW_MS,
} from './write-lock.ts';

/** Runs write transactions one at a time for this process, grouping queued ones into a single commit. */
export type Writer = {
  /**
   * Runs `fn` inside a write transaction (BEGIN IMMEDIATE) and resolves with its result only after the commit.
   * `fn` must do database work only and may run more than once: it shares the transaction with other queued
   * writes, and when one of them throws, the group is rolled back and run again with each write in its own
   * savepoint, so a throw rolls back `fn`'s own work and rejects only its own promise. Expected outcomes (not
   * found, conflict) should be returned as values: a throw costs the whole group a rollback and a second run.
   * While another process holds the write lock, rejects with DatabaseBusyError once `fn` has waited the busy budget.
   * With `urgent`, `fn` goes to the head of the queue (a lease renewal must not wait behind a burst of commands) and
   * still waits its own whole busy budget.
   */
  write<T>(fn: (tx: Tx) => Promise<T>, options?: { urgent?: boolean }): Promise<T>;
  /** Resolves once everything queued so far has committed or failed. */
  idle(): Promise<void>;
};

/** A queued write; `deadline` (performance.now() ms) is when it stops waiting for another process's lock. */
type Job = { fn: (tx: Tx) => Promise<unknown>; resolve: (v: unknown) => void; reject: (e: unknown) => void; deadline: number };
type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };
/** How a group attempt ended: it ran (every job settled), or another process held the write lock (no job ran). */
type GroupRun = { ran: true } | { ran: false; busy: unknown };

/** How fast the writer's memory of holding the lock fades (heldLately in createWriter). */
const HELD_DECAY_MS = 5000;

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
 * SQLite's lock is not fair, so on a local file the writer takes turns: one that spent SATURATED_SHARE of the last
 * second holding the lock or waiting for it leaves it free for YIELD_MS after its group (≈ 3.5 % of a saturated
 * writer's time; a writer with gaps of its own never pauses), and one that held it for HEAVY_HELD_SHARE of the last
 * few seconds probes more slowly while it waits, so a light writer most likely takes such a gap first.
 */
export function createWriter(db: Database, options: { maxGroup?: number; busyTimeoutMs?: number } = {}): Writer {
  const maxGroup = options.maxGroup ?? 64;
  const budgetMs = options.busyTimeoutMs ?? busyBudgetOf(db.$client);
  const queue: Job[] = [];
  let draining: Promise<void> | undefined;
  const yields = db.$client.protocol === 'file';
  // Fairness towards other processes' writers (see YIELD_MS), timed with the monotonic clock: a wall clock stepped
  // back or forth must not turn into a pause of the queue or switch the yields off.
  const now = () => performance.now();
  /** The current window: since when, and how long the drain spent holding the lock or waiting for it in it. */
  let windowFrom = now();
  let busyMs = 0;
  /** The lock held lately, decaying over HELD_DECAY_MS: what tells a heavy writer from a light one. */
  let recentHeldMs = 0;
  let recentAt = now();
  const heldLately = (heldMs = 0) => {
    const t = now();
    recentHeldMs = recentHeldMs * Math.exp(-(t - recentAt) / HELD_DECAY_MS) + heldMs;
    recentAt = t;
    return recentHeldMs / HELD_DECAY_MS;
  };

  /**
   * Called after each group: once a window (YIELD_WINDOW_MS) is over, leaves the lock free for YIELD_MS if the drain
   * spent SATURATED_SHARE of it holding the lock or waiting for it, then starts the next window.
   */
  async function yieldIfSaturated(): Promise<void> {
    const t = now();
    if (t - windowFrom < YIELD_WINDOW_MS) return;
    const saturated = busyMs >= SATURATED_SHARE * (t - windowFrom);
    if (saturated) await sleep(YIELD_MS);
    windowFrom = now();
    busyMs = 0;
  }

  /** Whether this writer held the lock for HEAVY_HELD_SHARE of the last few seconds: it then waits with slower probes. */
  const heavy = () => heldLately() >= HEAVY_HELD_SHARE;

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

  /**
   * Rejects the jobs whose wait for another process's lock has run out, wherever they are in the queue: an urgent job
   * at the head may have been queued after the jobs behind it and wait longer than they do.
   */
  function expire(cause: unknown): void {
    const t = now();
    let kept = 0;
    for (const job of queue) {
      if (job.deadline <= t) job.reject(new DatabaseBusyError(cause));
      else queue[kept++] = job;
    }
    queue.length = kept;
  }

  /** The earliest deadline in the (non-empty) queue. */
  function nextDeadline(): number {
    let earliest = Number.POSITIVE_INFINITY;
    for (const job of queue) earliest = Math.min(earliest, job.deadline);
    return earliest;
  }

  async function drain(): Promise<void> {
    let wait = 0;
    try {
      while (queue.length > 0) {
        const from = now();
        // Probing first keeps a taken lock from failing client.transaction()'s BEGIN, which would poison a connection.
        // Any other failure of the probe (a closed client, an I/O error) is left for the group's own BEGIN to report.
        const busy = await writeLockBusy(db.$client).catch(() => undefined);
        let run: GroupRun = { ran: false, busy };
        if (busy === undefined) {
          const group = queue.splice(0, maxGroup);
          const heldFrom = now();
          run = await runGroup(group);
          if (yields) heldLately(now() - heldFrom);
          if (!run.ran) queue.unshift(...group);
        }
        if (run.ran) {
          wait = 0;
          busyMs += now() - from;
          if (yields) await yieldIfSaturated();
          continue;
        }
        expire(run.busy);
        if (queue.length === 0) break;
        wait = nextBusySleep(wait, yields && heavy());
        await sleep(Math.min(wait, nextDeadline() - now()));
        busyMs += now() - from;
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
        const deadline = now() + budgetMs;
        // an urgent job waits its own whole budget, however long the jobs it goes ahead of have waited already
        const queued: Job = { fn: job, resolve: resolve as (v: unknown) => void, reject, deadline };
        if (options?.urgent) queue.unshift(queued);
        else queue.push(queued);
        draining ??= new Promise<void>((resolve) => nextTurn(() => resolve(context.with(ROOT_CONTEXT, drain))));
      });
    },
    async idle() {
      while (draining) await draining;
    },
  };
}
