import type { Client, Transaction } from '@libsql/client';
import { sleep } from '../worker/sleep.ts';
import { DatabaseBusyError, isBusyError } from './busy.ts';

/**
 * The busy timeout handed to the libSQL driver, in ms. The local driver waits for a lock synchronously, with the
 * event loop blocked, so it gets only a few ms; a longer wait for another process happens asynchronously here.
 */
export const DRIVER_BUSY_WAIT_MS = 5;

const MAX_SLEEP_MS = 25;

const budgets = new WeakMap<Client, number>();

/** Records how long, in total, writes through `client` may wait for another process's write lock (DATABASE_BUSY_TIMEOUT_MS). */
export function setBusyBudget(client: Client, ms: number): void {
  budgets.set(client, ms);
}

/** The wait recorded by setBusyBudget; 0 for a client opened without it, whose driver timeout is then the whole wait. */
export function busyBudgetOf(client: Client): number {
  return budgets.get(client) ?? 0;
}

/**
 * How long a saturated writer leaves the write lock free before its next group: longer than a light writer of another
 * process sleeps between two attempts (nextBusySleep, plus the driver's wait of each attempt), so one of its attempts
 * falls in the gap. SQLite hands the lock to whoever asks first, not to whoever waited longest, so processes
 * writing back to back would otherwise starve the others' writes (lease claims, marks) until their busy budget ran out.
 */
export const YIELD_MS = MAX_SLEEP_MS + 2 * DRIVER_BUSY_WAIT_MS;

/** The window over which a writer measures how busy it keeps the lock; it yields at most once per window. */
export const YIELD_WINDOW_MS = 1000;

/**
 * The share of a window a writer must have spent holding the lock or waiting for it to yield: below it, the lock is
 * free often enough (in gaps however short) that another process's attempts find it free.
 */
export const SATURATED_SHARE = 0.9;

/**
 * A writer that held the lock for this share of the last few seconds is a heavy one: while it waits, it probes at most
 * every HEAVY_MAX_SLEEP_MS instead of MAX_SLEEP_MS, so in a gap another heavy writer left (YIELD_MS) a light writer
 * (a lease claim, a relay's marks) most likely probes first. Slower probes, not faster ones: every probe blocks the
 * event loop for up to the driver's wait, and several waiters in one process probing fast would starve its sockets.
 */
export const HEAVY_HELD_SHARE = 0.2;
const HEAVY_MAX_SLEEP_MS = 100;

/** The next sleep between two attempts at the write lock: 1, 2, 4 … ms, at most 25 ms (100 ms for a `heavy` writer). */
export function nextBusySleep(previousMs: number, heavy = false): number {
  return Math.min(heavy ? HEAVY_MAX_SLEEP_MS : MAX_SLEEP_MS, Math.max(1, previousMs * 2));
}

/**
 * Whether another process holds the write lock of a local database: the SQLITE_BUSY error if it does, else undefined.
 * Tries BEGIN IMMEDIATE; ROLLBACK through executeMultiple, which finalizes its statements: a BEGIN that fails there,
 * unlike one from client.transaction(), leaves no un-reset statement on the pooled connection (see
 * dropPoisonedConnections). Remote databases answer undefined: their server does the waiting.
 */
export async function writeLockBusy(client: Client): Promise<unknown> {
  if (client.protocol !== 'file') return undefined;
  try {
    await client.executeMultiple('BEGIN IMMEDIATE; ROLLBACK');
    return undefined;
  } catch (error) {
    if (isBusyError(error)) return error;
    throw error;
  }
}

/**
 * @libsql/client 0.18 leaves a statement that failed with SQLITE_BUSY (a BEGIN IMMEDIATE from client.transaction())
 * un-reset on its pooled connection. Until GC finalizes it, every COMMIT on that connection fails with "cannot
 * commit transaction - SQL statements in progress", and an autocommit write on it silently stays uncommitted while
 * holding the write lock. Reopening the pool closes that connection; the next write gets a fresh one.
 */
export function dropPoisonedConnections(client: Client): void {
  if (client.protocol !== 'file') return;
  try {
    void client.reconnect();
  } catch {
    // A client that cannot reconnect (closed) has no pooled connection to drop.
  }
}

/**
 * Runs `attempt` until it does not fail with SQLITE_BUSY, sleeping 1, 2, 4 … 25 ms in between, for at most
 * `budgetMs`; then throws DatabaseBusyError. Each attempt blocks the event loop for the driver's few ms at most.
 */
export async function retryWhileBusy<T>(budgetMs: number, attempt: () => Promise<T>): Promise<T> {
  const until = performance.now() + budgetMs;
  for (let wait = 0; ; ) {
    try {
      return await attempt();
    } catch (error) {
      if (!isBusyError(error)) throw error;
      if (performance.now() >= until) throw error instanceof DatabaseBusyError ? error : new DatabaseBusyError(error);
    }
    wait = nextBusySleep(wait);
    await sleep(Math.min(wait, until - performance.now()));
  }
}

/**
 * Opens a write transaction (BEGIN IMMEDIATE) on `client`, waiting asynchronously while another process holds the
 * write lock, for at most `budgetMs` (the client's busy budget by default); then throws DatabaseBusyError.
 * `setup` (e.g. a connection PRAGMA) runs just before each BEGIN, outside the transaction; on a local file it lands
 * on the connection the transaction gets (the pool hands back the connection released last), which the caller
 * should verify inside the transaction when it matters.
 */
export function beginWrite(client: Client, options: { budgetMs?: number; setup?: string } = {}): Promise<Transaction> {
  return retryWhileBusy(options.budgetMs ?? busyBudgetOf(client), async () => {
    if (options.setup) await client.executeMultiple(options.setup);
    const busy = await writeLockBusy(client);
    if (busy !== undefined) throw busy;
    try {
      return await client.transaction('write');
    } catch (error) {
      if (isBusyError(error)) dropPoisonedConnections(client);
      throw error;
    }
  });
}
