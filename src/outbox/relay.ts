import { jetstreamManager } from '@nats-io/jetstream';
import { createAckPublisher, type AckPublisher } from '../nats/ack-publisher.ts';
import type { NatsConnection, Subscription } from '@nats-io/nats-core';
import { CONNECT_RETRY_MS, connectUnlessStopped, type ConnectNats } from '../nats/connect.ts';
import { ensureStream, STREAM_RECREATE_SETTLE_MS, UnsafeStreamConfigError } from '../nats/ensure-stream.ts';
import { kickSubject, type StreamSettings } from '../nats/stream-settings.ts';
import type { Signal } from '../signal.ts';
import { isInfrastructureError } from '../db/infrastructure-error.ts';
import { sqlRunner } from '../db/open-database.ts';
import { createBrokerState, type BrokerState } from '../worker/broker-state.ts';
import { createOutageBackoff } from '../worker/outage-backoff.ts';
import { createStopControl, type StopOptions } from '../worker/stop-control.ts';
import { createLeaseKeeper, type LeaseKeeper, type LeaseSnapshot } from '../leases/lease-keeper.ts';
import { applyPartitionCount, PartitionCountChangeError, readPartitionCount } from './outbox-partitions.ts';
import { countSentMarks, foldSentMarks, RELAY_LEASE_SCOPE, type Floor } from './relay-store.ts';
import { relayPass, type RelayPassDeps, type RelayPassOptions } from './relay-pass.ts';
import { isPermissionViolation } from '../nats/permission-violation.ts';

/** Batches a pass may fetch after its first while draining a backlog (see RelayPassOptions.continuations). */
const CONTINUATIONS = 3;

/**
 * Entries of outbox_sent folded into the outbox in one write once the relay has caught up (see foldSentMarks): at
 * 8 KiB events ≈ 20 ms of the writer, so commands and new events wait at most that long behind the fold.
 */
const FOLD_BATCH = 500;

/**
 * The most entries outbox_sent holds while a relay drains (see markSent): a fetch from the oldest pending row and the
 * stats walk them, ≈ 1 µs each, so at most ≈ 50 ms; from there on a draining relay marks rows in place.
 */
const RECORDED_MARKS_MAX = 50_000;

/**
 * How long a stopping relay still waits for the broker: for the PubAcks of the pass in flight, a duplicate's stored-body
 * lookup, the stream check. Then it closes the connection, which fails whatever still waits: those rows stay pending and
 * are published again by the next relay, deduplicated by their ids, so a broker that does not answer cannot hold a stop
 * for the whole RELAY_PUBLISH_TIMEOUT_MS.
 */
const STOP_BROKER_WAIT_MS = 2000;

/** What the relay logs once when its user may not read the stream's messages to compare a duplicate with its row. */
const LOOKUP_REFUSED = (stream: string) =>
  `relay: the broker refuses $JS.API.STREAM.MSG.GET.${stream} to this user, so a PubAck saying duplicate is taken as it says and an event id used twice goes unnoticed; grant it (docs/production.md)`;

/** No floor: the next pass reads from the oldest pending row. */
const NO_FLOOR: Floor = { seq: 0, epoch: null };

export type RelayDeps = RelayPassDeps & {
  connect: ConnectNats;
  stream: StreamSettings;
  /** Notified by in-process commits and by kicks from other processes. */
  wake: Signal;
  pollMs: number;
  /** The partition count this relay applies at start (see applyPartitionCount). */
  partitions: number;
  /** This relay among the others: its unique lease owner name and the leases' time to live. */
  lease: { owner: string; ttlMs: number };
  /** The most marks recorded apart while draining (RECORDED_MARKS_MAX unless a test sets fewer). */
  recordedMarksMax?: number;
};

/** `signal` and `timeLimitMs` stop it after the pass in flight. */
export type RelayRunOptions = StopOptions & {
  /** Stops once at least this many rows were acknowledged. */
  maxMessages?: number;
  /** Stops after the first pass that finds nothing to do (bounded runs, e.g. a cron tick). */
  untilIdle?: boolean;
};

/**
 * What a run did, summed over its completed passes. A pass whose mark-sent write failed (a database outage, a stop) is
 * left out, also one counted while its mark was still being written: its rows stay pending and come back as
 * duplicates, so `published` can be below what the stream stored. The relay's metrics count every acknowledgement.
 */
export type RelayRunSummary = { passes: number; published: number; duplicates: number; failed: number; parked: number; brokerErrors: number };

/** A relay worker; `run` loops until stopped and resolves with what it did. */
export type Relay = {
  run(options?: RelayRunOptions): Promise<RelayRunSummary>;
  state(): BrokerState;
  /** When (by `clock`) the last pass that met no broker or database error ended; undefined before the first. */
  lastSuccessfulPassAt(): Date | undefined;
  /** The partitions this relay leases now, while it runs; undefined otherwise. */
  leases(): LeaseSnapshot | undefined;
};

/**
 * Creates the relay loop: connect (retrying with back-off), ensure the stream, then — once — apply the partition
 * count and start claiming a fair share of the partitions' leases (kept on a timer while it runs, released when it
 * stops), then pass after pass over the rows of the partitions it leases, its marks fenced by their epochs. It sleeps
 * until woken or for pollMs when idle, and backs off the whole worker 1 s, 2 s, 4 s … max (jittered) while the
 * broker is unavailable; a reconnect ends that wait, or skips it when the connection came back during the failed
 * attempt and the failure before (if any since the last good pass) was waited out in full; without a connection it
 * tries to connect again at least every CONNECT_RETRY_MS, and a stop ends a connect that hangs. An unsafe stream
 * configuration or a refused partition count is fatal: `run` rejects with UnsafeStreamConfigError or
 * PartitionCountChangeError. Registers the relay's gauges (outbox_relay_broker_up,
 * outbox_relay_last_pass_timestamp_seconds, outbox_relay_partitions_owned) in `deps.metrics`.
 */
export function createRelay(deps: RelayDeps): Relay {
  const broker = createBrokerState({ log: deps.log, unavailable: 'relay: broker unavailable, backing off', connected: 'relay: broker available, publishing' });
  const backoff = { baseMs: deps.settings.backoffBaseMs, maxMs: deps.settings.maxBackoffMs, random: deps.random };
  const gauges = deps.metrics.relayGauges();
  gauges.brokerUp.set(0);
  /** Since when the broker has been unavailable without a break; undefined while it answers. */
  let unavailableSince: number | undefined;
  const setBroker = (next: BrokerState, error?: unknown) => {
    broker.set(next, error);
    gauges.brokerUp.set(next === 'connected' ? 1 : 0);
    if (next === 'connected') unavailableSince = undefined;
    else unavailableSince ??= Date.now();
  };
  let lastSuccessfulPass: Date | undefined;
  let keeper: LeaseKeeper | undefined;
  const leaseMetrics = deps.metrics.leaseMetrics();

  return {
    state: broker.state,
    lastSuccessfulPassAt: () => lastSuccessfulPass,
    leases: () => keeper?.snapshot(),
    async run(options = {}) {
      const summary: RelayRunSummary = { passes: 0, published: 0, duplicates: 0, failed: 0, parked: 0, brokerErrors: 0 };
      // before its first good pass the relay's start stands in, so the stalled alert also sees a relay that never had one
      gauges.lastPassTimestamp.set((lastSuccessfulPass ?? deps.clock()).getTime() / 1000);
      const stop = createStopControl(options);
      const brokerOutage = createOutageBackoff(backoff);
      const databaseOutage = createOutageBackoff(backoff);
      let nc: NatsConnection | undefined;
      let kicks: Subscription | undefined;
      /** Aborted when the connection reconnects while the relay backs off from a broker error. */
      let reconnected: AbortController | undefined;
      /** Reconnects of this run's connections so far, counted by their status loops. */
      let reconnects = 0;
      /** `reconnects` when the current attempt (connecting, ensuring the stream, a pass) began. */
      let reconnectsAtAttempt = 0;
      /** The last broker failure since the last good pass was retried before its back-off ran out. */
      let retriedEarly = false;
      /** Publishes on `nc`, one inbox subscription for every PubAck; made anew with each connection. */
      let publisher: AckPublisher | undefined;
      /** False until the stream is known to exist on this connection; set again after a broker error. */
      let streamReady = false;
      /** The stream was ensured before: finding it missing means it was deleted or lost since. */
      let streamUsed = false;
      /** Reads the stream's message at a sequence on the current connection (see RelayPassOptions.storedMessage). */
      let storedMessage: RelayPassOptions['storedMessage'];
      /** The broker refused such a read for lack of permission (said once in the log). */
      let lookupRefused = false;
      const giveUpOnBroker = () => {
        giveUpTimer = setTimeout(() => {
          publisher?.close();
          void nc?.close().catch(() => undefined);
        }, STOP_BROKER_WAIT_MS);
      };
      let giveUpTimer: ReturnType<typeof setTimeout> | undefined;
      stop.signal.addEventListener('abort', giveUpOnBroker, { once: true });
      /** The previous pass's mark-sent write, still running, and the rows it marks (left out of the next fetch). */
      let marking: { done: Promise<void>; seqs: number[]; pass: { fenced: number } } | undefined;
      /** Every pending row at or below this seq was held behind an earlier row of its aggregate when last read. */
      let floor: Floor = NO_FLOOR;
      /**
       * outbox_sent may hold entries to fold: at start (a relay stopped during a drain may have left some), after a pass
       * that recorded its rows there, and when partitions change hands (their last owner may have left some).
       */
      let unfolded = true;
      /** The leases, kept from the first time the broker answered and the partition count was applied. */
      let leases: LeaseKeeper | undefined;
      let keeping: Promise<void> | undefined;
      const leaseStop = new AbortController();
      let leaseVersion = 0;
      /**
       * The database could not be used (locked past the busy timeout, I/O error, disk full, unreachable): rows
       * acknowledged but not marked are published again later and acknowledged as duplicates. Anything else is
       * a bug and surfaces.
       */
      const onDatabaseTrouble = async (error: unknown) => {
        if (!isInfrastructureError(error)) throw error;
        deps.metrics.publishErrors.inc('database_unavailable');
        deps.log.warn('relay: database unavailable, backing off', { error: String(error) });
        await databaseOutage.backOff(stop.signal);
      };
      /**
       * Folds the marks recorded in outbox_sent into the outbox: every one (`all`, unless the relay is stopping) or one
       * batch. Whether any is left; undefined (after backing off) when the database refused.
       */
      const foldMarks = async (all: boolean): Promise<boolean | undefined> => {
        try {
          let folded: number;
          do folded = await deps.writer.write((tx) => foldSentMarks(tx, FOLD_BATCH));
          while (all && folded >= FOLD_BATCH && !stop.signal.aborted);
          return folded >= FOLD_BATCH;
        } catch (error) {
          await onDatabaseTrouble(error);
          return undefined;
        }
      };
      /**
       * A run bounded by maxMessages ends with its last mark written and the marks recorded so far folded in, so its
       * rows read as sent (and can be compacted) without waiting for another run: at most as many fold writes as
       * the entries there take, however fast other relays record more. It does not back off, since it is ending: a
       * refused mark leaves its rows pending (published again, as duplicates), a refused fold leaves its entries to
       * the next relay's fold.
       */
      const foldBeforeTheEnd = async (lastMark: Promise<void> | undefined) => {
        try {
          await lastMark;
          if (!unfolded) return;
          for (let writes = Math.ceil((await countSentMarks(sqlRunner(deps.db))) / FOLD_BATCH); writes > 0 && !stop.signal.aborted; writes--)
            if ((await deps.writer.write((tx) => foldSentMarks(tx, FOLD_BATCH))) < FOLD_BATCH) break;
        } catch (error) {
          if (!isInfrastructureError(error)) throw error;
          deps.metrics.publishErrors.inc('database_unavailable');
          deps.log.warn('relay: the run ends with marks left for the next one to write or fold', { error: String(error) });
        }
      };
      /** Takes a pass counted while its mark was being written out of the summary: the mark was refused. */
      const uncount = (pass: Awaited<ReturnType<typeof relayPass>>) => {
        summary.passes--;
        summary.published -= pass.published;
        summary.duplicates -= pass.duplicates;
      };
      /** Waits for a mark-sent write; false (after backing off) when the database refused it. */
      const settle = async (done: Promise<void> | undefined): Promise<boolean> => {
        try {
          await done;
          return true;
        } catch (error) {
          await onDatabaseTrouble(error);
          return false;
        }
      };
      /** The broker failed (connecting, ensuring the stream, or publishing): count it and back off (at most `maxMs`). */
      const onBrokerTrouble = async (error: unknown, maxMs?: number) => {
        summary.brokerErrors++;
        setBroker('unavailable', error);
        // the connection coming back ends the wait: a broker restarted after a long outage is used at once, not after
        // the rest of a back-off that has grown to RELAY_MAX_BACKOFF_MS
        const back = new AbortController();
        // So does a reconnect during the failed attempt (PubAcks lost with the old connection time out only later),
        // but not right after a wait that was cut short: a broker that drops every connection it accepts is still
        // waited out at least every other failure, and every retry without a full wait took a reconnect of its own.
        if (reconnects !== reconnectsAtAttempt && !retriedEarly) back.abort();
        reconnected = back;
        await brokerOutage.backOff(AbortSignal.any([stop.signal, back.signal]), maxMs);
        reconnected = undefined;
        retriedEarly = back.signal.aborted;
      };

      try {
        while (!stop.signal.aborted) {
          reconnectsAtAttempt = reconnects;
          try {
            if (!nc || nc.isClosed()) {
              streamReady = false;
              const opened = await connectUnlessStopped(deps.connect, stop.signal);
              if (!opened) break;
              nc = opened;
              publisher = createAckPublisher(nc, deps.settings.publishTimeoutMs);
              void (async (statuses: AsyncIterable<{ type: string }>) => {
                for await (const status of statuses)
                  if (status.type === 'reconnect') {
                    reconnects++;
                    reconnected?.abort();
                  }
              })(nc.status());
              kicks = nc.subscribe(kickSubject(deps.stream.name), { callback: () => deps.wake.notify() });
            }
            // Also after a broker error: an operator may have deleted the stream, or a broker lost its store.
            if (!streamReady) {
              const jsm = await jetstreamManager(nc, { timeout: deps.settings.publishTimeoutMs });
              // a stream this relay used and finds gone is created again only once its deletion has had time to finish
              await ensureStream(jsm, deps.stream, deps.log, { settleMs: streamUsed ? STREAM_RECREATE_SETTLE_MS : 0, signal: stop.signal });
              streamUsed = true;
              storedMessage = async (seq) => {
                try {
                  const stored = await jsm.streams.getMessage(deps.stream.name, { seq });
                  return stored ? { subject: stored.subject, data: stored.data } : 'gone';
                } catch (error) {
                  if (!isPermissionViolation(error)) throw error;
                  // a broker that will not show its messages cannot have them compared: its duplicate is taken as it says
                  if (!lookupRefused) deps.log.warn(LOOKUP_REFUSED(deps.stream.name), { error: String(error) });
                  lookupRefused = true;
                  return null;
                }
              };
              streamReady = true;
              setBroker('connected');
            }
          } catch (error) {
            if (error instanceof UnsafeStreamConfigError) throw error;
            // stopped while ensuring the stream (its re-creation waits on the stop signal): not a broker error
            if (stop.signal.aborted) break;
            if (nc?.isClosed() !== false) {
              await nc?.close().catch(() => undefined);
              nc = undefined;
            }
            deps.metrics.publishErrors.inc('broker_unavailable');
            // without a connection no reconnect can end the wait: try connecting again at least every CONNECT_RETRY_MS
            await onBrokerTrouble(error, nc === undefined ? CONNECT_RETRY_MS : undefined);
            continue;
          }

          // a stop that landed while connecting or ensuring the stream: no leases claimed, nothing published
          if (stop.signal.aborted) break;
          // The partition count before any lease: a relay must not claim partitions of a count it was asked to change.
          // Only once the broker answered, so a relay that cannot publish never takes partitions from one that can.
          if (!leases) {
            try {
              const applied = await applyPartitionCount(deps.writer, deps.partitions);
              if (applied.hashed > 0 || applied.previous !== applied.count)
                deps.log.info('relay: outbox partitions applied', {
                  partitions: applied.count,
                  previous: applied.previous,
                  rowsGivenAPartition: applied.hashed,
                });
            } catch (error) {
              if (error instanceof PartitionCountChangeError) throw error;
              await onDatabaseTrouble(error);
              continue;
            }
            leases = createLeaseKeeper({
              writer: deps.writer,
              scope: RELAY_LEASE_SCOPE,
              owner: deps.lease.owner,
              ttlMs: deps.lease.ttlMs,
              partitions: readPartitionCount,
              log: deps.log,
              events: leaseMetrics,
              onChange: () => deps.wake.notify(),
              // a relay that has not reached the broker for a whole TTL leaves its partitions to relays that do
              eligible: () => unavailableSince === undefined || Date.now() - unavailableSince < deps.lease.ttlMs,
            });
            keeper = leases;
            keeping = leases.run(leaseStop.signal);
            await leases.ready();
            leaseVersion = leases.version();
          }
          if (stop.signal.aborted) break;
          const held = leases;
          const active = held.active();
          if (held.version() !== leaseVersion) {
            // partitions came or went: rows below the floor may now be ours
            leaseVersion = held.version();
            floor = NO_FLOOR;
            unfolded = true;
          }
          if (active.size === 0) {
            const previous = marking;
            marking = undefined;
            await settle(previous?.done);
            // a relay standing by (the others hold every partition) is healthy while its claims succeed
            if (held.current()) {
              lastSuccessfulPass = deps.clock();
              gauges.lastPassTimestamp.set(lastSuccessfulPass.getTime() / 1000);
            }
            if (options.untilIdle) break;
            await deps.wake.wait(Math.max(deps.pollMs, Math.floor(deps.lease.ttlMs / 3)), stop.signal);
            continue;
          }
          // Draining a backlog (full batches), the next pass fetches and publishes while the previous pass's
          // mark-sent write runs (at most one outstanding), leaving that pass's rows out of its fetch. A partial
          // pass, or one with failures or a broker error, is marked before anything else is read.
          let pass: Awaited<ReturnType<typeof relayPass>>;
          try {
            pass = await relayPass(deps, publisher!, {
              ...(marking ? { exclude: marking.seqs } : {}),
              continuations: CONTINUATIONS,
              floor,
              deferMark: true,
              markLater: deps.recordedMarksMax ?? RECORDED_MARKS_MAX,
              lease: { owner: deps.lease.owner, epochs: active },
              isLeased: (partition) => held.active().get(partition) === active.get(partition),
              ...(storedMessage ? { storedMessage } : {}),
            });
          } catch (error) {
            const previous = marking;
            marking = undefined;
            floor = NO_FLOOR;
            await settle(previous?.done);
            await onDatabaseTrouble(error);
            continue;
          }
          // the broker answered this pass, whatever the database does with its marks
          if (pass.brokerError === undefined) setBroker('connected');
          const previous = marking;
          marking = undefined;
          const previousMarked = await settle(previous?.done);
          const full = pass.more;
          if (full) unfolded = true;
          // Rows at or below the floor were held when read; only a retry that comes due (the fetch itself notices),
          // a retried row acknowledged here, rows left unpublished by a broker error or because their lease ran out
          // mid-pass, or marks that did not commit or were fenced (their partition moved while they were written) can
          // leave one behind, so those read from the oldest pending row again.
          const leftBehind = (previous?.pass.fenced ?? 0) > 0 || pass.unleased > 0;
          floor = previousMarked && !leftBehind && !pass.ackedRetry && pass.brokerError === undefined ? pass.scannedTo : NO_FLOOR;
          if (previousMarked && full && pass.failed === 0 && pass.brokerError === undefined) {
            marking = { done: pass.marked, seqs: pass.ackedSeqs, pass };
            // counted below (a bounded run stops on it) and taken out again should its mark be refused
            pass.marked.catch(() => uncount(pass));
          } else {
            if (!(await settle(pass.marked))) {
              floor = NO_FLOOR;
              continue;
            }
            if (pass.fenced > 0) floor = NO_FLOOR;
          }
          databaseOutage.reset();
          summary.passes++;
          summary.published += pass.published;
          summary.duplicates += pass.duplicates;
          summary.failed += pass.failed;
          summary.parked += pass.parked;

          if (pass.brokerError !== undefined) {
            streamReady = false;
            await onBrokerTrouble(pass.brokerError);
            continue;
          }
          brokerOutage.reset();
          retriedEarly = false;
          if (previousMarked) {
            lastSuccessfulPass = deps.clock();
            gauges.lastPassTimestamp.set(lastSuccessfulPass.getTime() / 1000);
          }
          if (options.maxMessages !== undefined && summary.published + summary.duplicates >= options.maxMessages) {
            const previous = marking;
            marking = undefined;
            await foldBeforeTheEnd(previous?.done);
            break;
          }
          // A pass whose fetch started below recorded marks (a retry is due, the floor was reset) walked over them, and the
          // next ones may too: they are folded in at once, before anything else is read. Caught up (a partial pass), the
          // relay folds them a batch a pass, so that new rows keep going out meanwhile.
          if (pass.walkedMarks || (!full && unfolded)) {
            const left = await foldMarks(pass.walkedMarks);
            if (left === undefined) continue;
            unfolded = left;
            if (left && !full) continue;
          }
          if (!full) {
            if (options.untilIdle) break;
            await deps.wake.wait(deps.pollMs, stop.signal);
          }
        }
      } finally {
        await marking?.done.catch((error: unknown) => deps.log.warn('relay: marking the last pass failed', { error: String(error) }));
        // the last marks are in: hand the partitions over now rather than after their TTL
        leaseStop.abort();
        await keeping;
        keeper = undefined;
        stop.dispose();
        stop.signal.removeEventListener('abort', giveUpOnBroker);
        clearTimeout(giveUpTimer);
        kicks?.unsubscribe();
        publisher?.close();
        await nc?.close().catch(() => undefined);
        // the connection is closed: this relay no longer reaches the broker (its state() keeps the last one seen)
        gauges.brokerUp.set(0);
      }
      return summary;
    },
  };
}
