import type { Transaction } from '@libsql/client';
import { sqlOf } from '../db/open-database.ts';
import type { Writer } from '../db/writer.ts';
import type { Logger } from '../logger.ts';
import { sleep } from '../worker/sleep.ts';
import { claimLeases, releaseLeases, type ClaimResult } from './lease-store.ts';

/** What the keeper reports as it goes (metrics). */
export type LeaseEvents = {
  acquired?(partitions: number[]): void;
  lost?(partitions: number[]): void;
  owned?(count: number): void;
};

export type LeaseKeeperDeps = {
  /** The write queue of the database holding the leases. */
  writer: Writer;
  scope: string;
  /** This instance's unique name among the scope's members. */
  owner: string;
  ttlMs: number;
  /** How many partitions the scope has, read inside each claim's transaction. */
  partitions: (tx: Transaction) => Promise<number>;
  log: Logger;
  events?: LeaseEvents;
  /** Called whenever the partitions this instance may work on change. */
  onChange?: () => void;
  /**
   * Asked before each claim: false while this instance cannot do the work (its broker unreachable for a while), so
   * it releases what it holds and its membership, and claims nothing until it answers true again. Always true if omitted.
   */
  eligible?: () => boolean;
};

/** What an instance holds, for /ready and the status page. */
export type LeaseSnapshot = { owner: string; members: number; share: number; partitions: number[]; draining: number[] };

/** Keeps an instance's leases of one scope: claims on a timer, answers which partitions it may work on now. */
export type LeaseKeeper = {
  /** Claims until `signal` aborts, then releases every lease and the membership; never rejects. */
  run(signal: AbortSignal): Promise<void>;
  /**
   * Partition → epoch this instance may work on now: what its last successful claim holds, minus the surplus being
   * handed over; empty before the first claim and once a TTL passed since the last claim that succeeded.
   */
  active(): ReadonlyMap<number, number>;
  /** Changes whenever the set or epochs of active() change (also when the leases ran out locally, seen by active()). */
  version(): number;
  /** Resolves after the first claim ended, whether it succeeded or not. */
  ready(): Promise<void>;
  /** Whether a claim succeeded within the last TTL: this instance takes part, holding partitions or standing by. */
  current(): boolean;
  snapshot(): LeaseSnapshot;
};

const NONE: ReadonlyMap<number, number> = new Map();

/** Creates a LeaseKeeper; see claimLeases for the protocol of each claim. */
export function createLeaseKeeper(deps: LeaseKeeperDeps): LeaseKeeper {
  const { writer, scope, owner, ttlMs, log } = deps;
  let held = new Map<number, number>();
  let draining = new Set<number>();
  let work: ReadonlyMap<number, number> = NONE;
  let validUntil = 0;
  let version = 0;
  let last: ClaimResult | undefined;
  /** Whether a claim made this instance a member (since the last release). */
  let joined = false;
  let markReady: () => void = () => undefined;
  const firstClaim = new Promise<void>((resolve) => (markReady = resolve));

  const setWork = (next: ReadonlyMap<number, number>) => {
    const same = next.size === work.size && [...next].every(([p, e]) => work.get(p) === e);
    work = next;
    if (!same) {
      version++;
      deps.onChange?.();
    }
  };

  const apply = (res: ClaimResult, startedAt: number) => {
    if (res.acquired.length > 0) {
      deps.events?.acquired?.(res.acquired);
      log.info('leases: acquired partitions', { scope, owner, partitions: res.acquired, members: res.members, share: res.share });
    }
    if (res.lost.length > 0) {
      deps.events?.lost?.(res.lost);
      log.warn('leases: lost partitions to another instance', { scope, owner, partitions: res.lost });
    }
    if (res.dropped.length > 0) log.info('leases: partitions above the new partition count released', { scope, owner, partitions: res.dropped });
    if (res.released.length > 0) log.info('leases: handed over partitions', { scope, owner, partitions: res.released, members: res.members, share: res.share });
    held = res.owned;
    draining = new Set(res.surplus);
    last = res;
    validUntil = startedAt + ttlMs;
    deps.events?.owned?.(held.size);
    setWork(new Map([...held].filter(([p]) => !draining.has(p))));
  };

  return {
    async run(signal) {
      try {
        while (!signal.aborted) {
          const startedAt = Date.now();
          let waitMs = Math.min(1000, Math.floor(ttlMs / 3));
          if (deps.eligible && !deps.eligible()) {
            if (joined) {
              setWork(NONE);
              try {
                await writer.write((tx) => releaseLeases(sqlOf(tx), scope, owner), { urgent: true });
                joined = false;
                log.warn('leases: cannot do the work; gave up partitions and membership until it can', { scope, owner, partitions: [...held.keys()] });
                held = new Map();
                draining = new Set();
                validUntil = 0;
                deps.events?.owned?.(0);
              } catch (error) {
                log.warn('leases: could not release; they run out after their TTL', { scope, owner, error: String(error) });
              }
            }
            markReady();
            await sleep(waitMs, signal);
            continue;
          }
          try {
            // at the head of the queue: behind a burst of commands the leases would run out
            const res = await writer.write(
              async (tx) => {
                const raw = sqlOf(tx);
                return claimLeases(raw, { scope, owner, partitions: await deps.partitions(raw), ttlMs, held, draining });
              },
              { urgent: true },
            );
            apply(res, startedAt);
            joined = true;
            waitMs = res.nextInMs;
          } catch (error) {
            log.warn('leases: could not renew; retrying', { scope, owner, error: String(error) });
          }
          markReady();
          // wake up when the leases would run out locally, so work stops then even if no claim succeeds
          const untilExpiry = validUntil - Date.now();
          await sleep(untilExpiry > 0 ? Math.min(waitMs, untilExpiry + 1) : waitMs, signal);
          // leases that ran out stop the work even if nobody asks active() (setWork changes nothing twice)
          if (Date.now() >= validUntil) setWork(NONE);
        }
      } finally {
        setWork(NONE);
        try {
          await writer.write((tx) => releaseLeases(sqlOf(tx), scope, owner), { urgent: true });
          if (held.size > 0) log.info('leases: released partitions', { scope, owner, partitions: [...held.keys()] });
        } catch (error) {
          log.warn('leases: could not release; they run out after their TTL', { scope, owner, error: String(error) });
        }
        held = new Map();
        deps.events?.owned?.(0);
        markReady();
      }
    },
    active: () => {
      // leases that ran out locally count as a change at once (version(), onChange), not only when the loop wakes
      if (Date.now() >= validUntil && work.size > 0) setWork(NONE);
      return work;
    },
    version: () => version,
    ready: () => firstClaim,
    current: () => Date.now() < validUntil,
    snapshot: () => ({
      owner,
      members: last?.members ?? 0,
      share: last?.share ?? 0,
      partitions: [...(Date.now() < validUntil ? work : NONE).keys()].sort((a, b) => a - b),
      draining: [...draining].sort((a, b) => a - b),
    }),
  };
}
