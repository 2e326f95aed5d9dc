import { isInfrastructureError } from '../db/infrastructure-error.ts';
import { sqlOf } from '../db/open-database.ts';
import type { Writer } from '../db/writer.ts';
import { createLeaseKeeper, type LeaseEvents, type LeaseKeeper } from '../leases/lease-keeper.ts';
import type { Logger } from '../logger.ts';
import { createSignal } from '../signal.ts';
import type { BrokerState } from '../worker/broker-state.ts';
import { sleep } from '../worker/sleep.ts';
import type { ConsumerRunner } from './consumer-runner.ts';
import { UnsafeConsumerConfigError } from '../nats/ensure-consumer.ts';
import { UnsafeStreamConfigError } from '../nats/ensure-stream.ts';
import { describeError } from './handle-once.ts';
import type { HeldLease } from './lease-fence.ts';
import { DurableLayoutError } from './partition-durables.ts';
import { createSitOut } from './sit-out.ts';
import { enterMode, leaseCount, leaveMode, type SubscriberMode } from './subscriber-mode.ts';
import type { DatabaseState } from './write-until-committed.ts';

/** The shortest lease a subscriber runs under: its pull requests (at least 1000 ms) must fit in what is left of it between renewals. */
export const MIN_SUBSCRIBER_LEASE_TTL_MS = 1500;

/** How long a leased runner's pull requests wait at the broker: half the lease (1000 to 5000 ms). */
export const pullExpiryFor = (ttlMs: number) => Math.min(5000, Math.max(1000, Math.floor(ttlMs / 2)));

/** What one instance holds of a subscriber, for /ready. */
export type SubscriberLeases = {
  mode: 'single' | 'partitioned';
  /** This instance's lease owner name. */
  owner: string;
  /** The partitions it may work on now (0 alone in single mode); empty on a standby. */
  partitions: number[];
  /** It runs none of the subscriber's consumers (another instance does, or none may yet). */
  standby: boolean;
  /** Live instances of the subscriber in this mode, this one included (0 before its first claim). */
  members: number;
  /** The mode whose live instances keep this one out (a switch of mode in progress). */
  waitingFor?: string;
};

/** What one subscriber's instance is made of: its leases' scope and owner, its mode, and how it runs a partition. */
export type LeasedSubscriberDeps = {
  /** The subscriber's name: its lease scope in its own database. */
  subscriber: string;
  /** This instance's unique name. */
  owner: string;
  mode: SubscriberMode;
  /** The subscriber database's write queue, where its leases live. */
  writer: Writer;
  ttlMs: number;
  log: Logger;
  /** What the lease keeper reports to (inbox_partitions_owned). */
  events?: LeaseEvents;
  /** A runner for one run over `partition` under `lease`; `fenced` stops that run (its lease was lost inside a write). */
  runnerFor(partition: number, lease: HeldLease, fenced: () => void): ConsumerRunner;
  /**
   * Readies the durables before any runner starts (see prepareDurables); `holdsFirst`: this instance holds partition 0
   * now. Once `signal` aborts (the instance stops) it gives up at once, whatever the broker does.
   */
  prepare(holdsFirst: () => boolean, signal: AbortSignal): Promise<boolean>;
  /**
   * Resolves once a fresh connection reached the broker (rejects otherwise): an instance that sat out because it could
   * not reach the broker rejoins after one succeeded (see createSitOut). Without it, an instance never sits out.
   */
  probe?: () => Promise<void>;
};

/** One subscriber in one instance: the leases it holds and the runners it runs for them. */
export type LeasedSubscriber = {
  name: string;
  /** Runs until `signal` aborts; rejects with a runner's fatal error or a refused switch of layout (DurableLayoutError). */
  run(signal: AbortSignal): Promise<void>;
  /** The broker as its runners see it (the worst of them); a standby keeps the last state seen. */
  state(): BrokerState;
  /** `unavailable` while a runner holds messages its database refuses to take. */
  databaseState(): DatabaseState;
  leases(): SubscriberLeases;
};

type Run = { epoch: number; stop: AbortController; runner: ConsumerRunner; done: Promise<void> };

const WORST: readonly BrokerState[] = ['unavailable', 'connecting', 'connected'];

/**
 * Runs a subscriber as one of several instances, through leases in its own database (scope: its name). Single mode
 * has one lease: its holder runs the consumer, the others stand by and start it once they acquire the lease (when
 * the holder released it on a graceful stop, or its TTL ran out). Partitioned mode has one lease per outbox
 * partition, shared fairly among the live instances, and a runner per held partition. A runner starts when its
 * partition is acquired (once prepare() says the durables are ready) and is stopped gracefully when the partition
 * is lost or found surplus: it finishes the write in progress, acknowledges it and hands back the rest, in stream
 * order. Instances in another mode (or another partition count) never run at once: an instance stands by until the
 * other mode's instances stopped (see enterMode), and steps back if it finds one after a pause. An instance that
 * holds partitions but cannot reach the broker (readying the durables, or a runner connecting, ensuring or pulling,
 * failing) for a whole TTL gives its leases and membership up and sits out until a probe reaches the broker (with
 * `deps.probe`, see createSitOut), so it never keeps the subscriber from a healthy instance.
 *
 * Why exactly-once and per-aggregate order hold across a hand-over, from an owner that stopped, was killed with
 * SIGKILL, or was paused (or stuck in a write) past its lease:
 * - exactly-once: the inbox (UNIQUE(event_id, consumer)) commits with the effect, so an event two instances both
 *   receive takes effect once and comes back `duplicate` to the other;
 * - inside one owner, each runner applies in stream order, an aggregate's later events waiting behind a failing one;
 * - nothing reaches the old owner after the new owner read the durable's state: a runner pulls only while its lease
 *   has at least a pull request's expiry left (`mayPull`), so its pull requests have all expired at the broker when
 *   the lease can be taken;
 * - what the old owner still holds comes back before the new owner applies anything newer of its aggregate: the new
 *   owner waits for every message the durable showed delivered and unacknowledged when it started that the
 *   subscriber's inbox does not hold (createMissingDeliveries), and the old owner hands its messages back when it
 *   stops or, killed, paused or stuck, stops keeping them alive once its lease is gone (`holds`), so the broker
 *   delivers them again about ack_wait after the lease's end; should progress heartbeats it sent before then reach
 *   the broker late (a network partition healing), the new owner waits on while the broker holds messages
 *   unacknowledged outside its run, up to four waits in all; one the old owner acknowledges instead was committed
 *   before it was acked;
 * - the epoch fence: each batch's write checks, in its own write transaction, that the lease is still this
 *   instance's at the epoch of its acquisition (fencedWriter), else it rolls back and the batch is handed back.
 * Order would hold without the fence (a late commit of the old owner only holds events the new owner waits for, and
 * then finds `duplicate`), but the fence makes the new owner a partition's only writer from its acquisition on, even
 * where the two instances' clocks disagree on when the lease ended, and it keeps a rebalance quick: a write that
 * loses the race with the release is handed back at once instead of being acknowledged after the new owner counted
 * found it missing, which would keep the new owner's later events of that aggregate waiting until the deadline.
 */
export function createLeasedSubscriber(deps: LeasedSubscriberDeps): LeasedSubscriber {
  const { subscriber, owner, mode, writer, ttlMs, log } = deps;
  const pullExpiryMs = pullExpiryFor(ttlMs);
  const runs = new Map<number, Run>();
  let keeper: LeaseKeeper | undefined;
  let renewedAt = 0;
  let lastState: BrokerState = 'connecting';
  let waitingFor: string | undefined;
  const fields = { subscriber, owner, mode: mode.partitioned ? `partitioned (${mode.partitions})` : 'single' };
  /** Whether its last attempt to ready the durables failed at the broker. */
  let prepareFailing = false;
  // Troubled: it holds partitions and cannot ready their durables, or a runner of one is not connected to the broker.
  const troubled = () => (prepareFailing && (keeper?.active().size ?? 0) > 0) || [...runs.values()].some((r) => r.runner.state() !== 'connected');
  const sitOut = deps.probe ? createSitOut({ ttlMs, troubled, probe: deps.probe, log, fields }) : undefined;

  // The keeper's claims go through here: a claim's start and commit bound what is left of its leases.
  const keeperWriter: Writer = {
    write: (fn, options) => {
      const startedAt = Date.now();
      return writer.write(fn, options).then((value) => {
        renewedAt = Math.max(renewedAt, startedAt);
        return value;
      });
    },
    idle: () => writer.idle(),
  };

  /**
   * Stands by until no instance runs the subscriber in another mode (checked every third of the TTL, at most 1 s);
   * rejects when its database cannot hold leases at all (no lease tables).
   */
  async function enter(signal: AbortSignal): Promise<void> {
    let told = false;
    while (!signal.aborted) {
      try {
        const entry = await writer.write((tx) => enterMode(sqlOf(tx), { subscriber, mode, owner, ttlMs }));
        if (entry.entered) {
          waitingFor = undefined;
          return;
        }
        waitingFor = entry.otherMode;
        if (!told)
          log.info('subscriber: instances run it in another mode; standing by until they stop', {
            ...fields,
            otherMode: entry.otherMode,
            instances: entry.instances,
          });
        told = true;
      } catch (error) {
        // a database without the lease tables (migrations not generated for them) never gets better by waiting
        if (!isInfrastructureError(error))
          throw new Error(
            `subscriber ${subscriber}: its database cannot hold its leases (${describeError(error)}); generate and apply its migrations (npm run db:generate -- ${subscriber})`,
            { cause: error },
          );
        log.warn('subscriber: could not read the mode of its other instances; retrying', { ...fields, error: describeError(error) });
      }
      await sleep(Math.min(1000, Math.floor(ttlMs / 3)), signal);
    }
  }

  /** Holds leases and runs their runners until `signal` aborts or another mode's instance shows up; rethrows a fatal error. */
  async function lease(signal: AbortSignal): Promise<void> {
    const wake = createSignal();
    let stepBack = false;
    let fatal: { error: unknown } | undefined;
    const k = createLeaseKeeper({
      writer: keeperWriter,
      scope: subscriber,
      owner,
      ttlMs,
      async partitions(tx) {
        const entry = await enterMode(tx, { subscriber, mode, owner, ttlMs });
        if (entry.entered) return leaseCount(mode);
        // paused past the TTL while an instance of another mode started: give everything up, stand by again
        waitingFor = entry.otherMode;
        stepBack = true;
        wake.notify();
        return 0;
      },
      log,
      ...(deps.events ? { events: deps.events } : {}),
      onChange: () => wake.notify(),
      ...(sitOut ? { eligible: sitOut.eligible } : {}),
    });
    keeper = k;
    const keeperStop = new AbortController();
    const keeping = k.run(keeperStop.signal);
    let prepared = false;
    let prepareFailures = 0;
    /** Leases (partition → epoch) a write found taken over: never run again, whatever the keeper still believes. */
    const fencedOut = new Map<number, number>();

    const start = (partition: number, epoch: number) => {
      const stop = new AbortController();
      const held: HeldLease = { scope: subscriber, partition, owner, epoch };
      const runner = deps.runnerFor(partition, held, () => {
        fencedOut.set(partition, epoch);
        stop.abort();
      });
      const holds = () => k.active().get(partition) === epoch;
      const mayPull = () => holds() && renewedAt + ttlMs - Date.now() >= pullExpiryMs;
      log.info('subscriber: consuming a partition', { ...fields, partition, epoch });
      const done = runner
        .run({ signal: stop.signal, lease: { mayPull, holds } })
        .then(
          () => undefined,
          (error: unknown) => void (fatal ??= { error }),
        )
        .finally(() => {
          lastState = runner.state();
          runs.delete(partition);
          log.info('subscriber: stopped consuming a partition', { ...fields, partition, epoch });
          wake.notify();
        });
      runs.set(partition, { epoch, stop, runner, done });
    };

    try {
      while (!signal.aborted && !stepBack && !fatal) {
        const active = k.active();
        if (!prepared && active.size > 0) {
          try {
            prepared = await deps.prepare(() => k.active().has(0), signal);
            if (prepared) lastState = 'connected';
            prepareFailures = 0;
            prepareFailing = false;
          } catch (error) {
            // a stop ends a prepare under way: what it says then is no finding about the durables
            if (signal.aborted) break;
            if (!isBrokerTrouble(error)) throw error;
            lastState = 'unavailable';
            prepareFailing = true;
            if (prepareFailures++ === 0)
              log.warn('subscriber: could not read its durables at the broker; retrying', { ...fields, error: describeError(error) });
          }
        }
        const wanted = prepared ? k.active() : new Map<number, number>();
        for (const [partition, run] of runs) if (wanted.get(partition) !== run.epoch) run.stop.abort();
        for (const [partition, epoch] of wanted) if (!runs.has(partition) && fencedOut.get(partition) !== epoch) start(partition, epoch);
        const retryMs = Math.min(1000 * 2 ** Math.min(prepareFailures, 5), 30_000);
        await wake.wait(prepared || active.size === 0 ? 60_000 : retryMs, signal);
      }
    } finally {
      // the runners first: each acknowledges its last write before its partition is released
      for (const run of runs.values()) run.stop.abort();
      await Promise.all([...runs.values()].map((r) => r.done));
      keeperStop.abort();
      await keeping;
      keeper = undefined;
    }
    if (fatal) throw fatal.error;
  }

  return {
    name: subscriber,
    async run(signal) {
      try {
        while (!signal.aborted) {
          await enter(signal);
          if (!signal.aborted) await lease(signal);
        }
      } finally {
        await writer.write((tx) => leaveMode(sqlOf(tx), { subscriber, mode, owner })).catch(() => undefined);
      }
    },
    state() {
      if (runs.size === 0) return lastState;
      const states = [...runs.values()].map((r) => r.runner.state());
      return WORST.find((s) => states.includes(s)) ?? 'connected';
    },
    databaseState: () => ([...runs.values()].some((r) => r.runner.databaseState() === 'unavailable') ? 'unavailable' : 'ok'),
    leases() {
      const snapshot = keeper?.snapshot();
      const partitions = snapshot?.partitions ?? [];
      return {
        mode: mode.partitioned ? 'partitioned' : 'single',
        owner,
        partitions,
        standby: runs.size === 0,
        members: snapshot?.members ?? 0,
        ...(waitingFor ? { waitingFor } : {}),
      };
    },
  };
}

/** A failure to reach the broker or read from it (retried), as opposed to a refused layout, stream or consumer (fatal). */
function isBrokerTrouble(error: unknown): boolean {
  return !(error instanceof DurableLayoutError || error instanceof UnsafeConsumerConfigError || error instanceof UnsafeStreamConfigError);
}
