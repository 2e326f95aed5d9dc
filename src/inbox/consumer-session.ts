import type { JsMsg } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { flushWithin } from '../nats/flush-within.ts';
import { createSignal } from '../signal.ts';
import type { BackoffSettings } from '../worker/backoff.ts';
import type { BrokerStateTracker } from '../worker/broker-state.ts';
import { sleep } from '../worker/sleep.ts';
import { createStopControl, type StopOptions } from '../worker/stop-control.ts';
import { describeError, type InboxResult } from './handle-once.ts';
import { createHeldMessages, type HeldMessage } from './held-messages.ts';
import type { InboxMessage } from './inbox-message.ts';
import { createOutcomes, emptySummary, finalOutcomes, type ConsumerRunSummary } from './message-outcomes.ts';
import { pullMessages, type PullSession, type PullSettings } from './pull-messages.ts';
import { createMissingDeliveries } from './missing-deliveries.ts';
import { stopWhenIdle } from './stop-when-idle.ts';
import { probeStreamRead, readStreamRange } from './stream-range.ts';
import type { BatchWrites } from './write-until-committed.ts';

/** Test-only fault injection at the consumer's dangerous point. */
export type ConsumerFaults = {
  /**
   * Runs after a message's transaction committed and before it is acknowledged. Throwing simulates a crash
   * there: nothing more is acknowledged, the runner stops and `run` rejects with the error.
   */
  afterCommit?(msg: InboxMessage, result: InboxResult): void | Promise<void>;
  /** Runs as a write of held messages is handed to the database, before it is queued (a test's sign of a write under way). */
  beforeWrite?(msgs: readonly InboxMessage[]): void;
};

/** `signal` and `timeLimitMs` stop pulling; the batch being written finishes and is acknowledged, the rest is handed back. */
export type ConsumerRunOptions = StopOptions & {
  /** Stops once this many messages reached a final outcome (processed, duplicate, ignored or dead-lettered). */
  maxMessages?: number;
  /** Stops once the consumer has nothing pending and nothing awaiting acknowledgement (bounded runs, tests). */
  untilIdle?: boolean;
  /**
   * The lease a leased run works under. `mayPull` is asked right before each pull request (false holds it back, asked
   * again shortly): whether the lease outlasts the request, so nothing reaches the run once another instance may own
   * the consumer. `holds` is asked before each heartbeat: once the lease is gone, what the run still holds is no longer
   * kept alive, so the broker delivers it again within ack_wait, to the new owner.
   */
  lease?: { mayPull(): boolean; holds(): boolean };
};

/** What every run of one consumer shares, prepared once by createConsumerRunner. */
export type ConsumerSessionParts = {
  /** Connection, stream and durable consumer (its ack_wait and max_ack_pending bound what a run holds). */
  pull: PullSettings;
  /** Most messages in one write. */
  batch: number;
  /** How often held messages are kept alive at the broker (well inside ack_wait). */
  heartbeatMs: number;
  idleCheckMs: number;
  /** The delay before a failed handler is tried again, by attempt. */
  retryDelay: BackoffSettings;
  broker: BrokerStateTracker;
  writes: BatchWrites;
  /** Of `eventIds`, those the subscriber applied or dead-lettered already (its inbox and dead letters). */
  applied(eventIds: string[]): Promise<Set<string>>;
  /** The id a message would leave in the inbox or the dead letters; undefined for one the subscriber ignores. */
  recordedAs(msg: InboxMessage): string | undefined;
  faults?: ConsumerFaults | undefined;
  /** Runs the stream-read check, unless one already ran for this subscriber (see SharedProbe). */
  shareProbe: SharedProbe;
};

/** Runs `probe` and returns its outcome; or, when a probe already ran in its place, resolves at once (that one reported). */
export type SharedProbe = (probe: () => Promise<void>) => Promise<void>;

/** A SharedProbe that runs only the first probe it is given: one check, one report, for all of a subscriber's runners. */
export function shareOnce(): SharedProbe {
  let ran = false;
  return async (probe) => {
    if (ran) return;
    ran = true;
    await probe();
  };
}

/** Most stream messages one check reads to find the deliveries a run lacks (see createMissingDeliveries), and a page of them. */
const RANGE_LIMIT = 500_000;
const RANGE_PAGE = 1000;
/**
 * How long a run waits for the broker to confirm the answers it sent: before it asks the consumer what is unacknowledged
 * (the question fails, and is asked again), and when it stops (it closes anyway: what it handed back returns after ack_wait).
 */
const STOP_FLUSH_MS = 2000;

/**
 * One run of a consumer (see createConsumerRunner for its guarantees): pulls while there is room, holds what it
 * pulled with progress heartbeats, writes held messages in stream order and answers each after its write committed
 * (see createOutcomes), until `options` stop it; then hands back, in stream order, what it still holds. Rejects
 * with a fatal pull error (an unsafe configuration) or a fault's simulated crash.
 */
export async function runConsumerSession(parts: ConsumerSessionParts, options: ConsumerRunOptions = {}): Promise<ConsumerRunSummary> {
  const { pull, batch, broker, writes, faults } = parts;
  const { name, log } = pull;
  const summary = emptySummary();
  const stop = createStopControl(options);
  /** Set by a fault that simulates a crash: nothing is answered afterwards. */
  let crash: { error: unknown } | undefined;
  let fatal: { error: unknown } | undefined;
  const held = createHeldMessages(pull.stream.prefix);
  const wake = createSignal(); // the write loop: something arrived or became due
  const roomFreed = createSignal(); // the pull loop: a write ended or the database came back
  stop.signal.addEventListener('abort', () => (wake.notify(), roomFreed.notify()), { once: true });
  let nc: NatsConnection | undefined;
  let session: PullSession | undefined;
  let epoch = 0; // bumped when the stream was re-created: its sequence numbers name other messages
  /** The highest stream sequence this run received. */
  let highestReceived = 0;
  let writing = false;
  let lastDelivery = Date.now();

  /** Answers every copy; never for a stream that was deleted since (its sequence numbers now name other messages). */
  const answer = (h: HeldMessage, how: (m: JsMsg) => void, what: string) => {
    if (h.epoch !== epoch) return;
    for (const m of h.copies) {
      try {
        how(m);
      } catch (error) {
        log.warn(`consumer: could not ${what}; the broker will deliver the message again`, {
          consumer: name,
          eventId: h.msg.fallbackId,
          error: describeError(error),
        });
      }
    }
  };

  /**
   * When held messages were last kept alive, and those held then that may have been redelivered elsewhere since: a
   * gap of half an ack_wait between keep-alives (the event loop held up, the lease gone for a while) may have let
   * the broker redeliver them.
   */
  let keptAliveAt = performance.now();
  let lapsed = new Set<number>();
  const keepAliveLapsed = () => performance.now() - keptAliveAt > pull.consumer.ackWaitMs / 2;
  const heartbeat = setInterval(() => {
    if (crash || !(options.lease?.holds() ?? true)) return;
    if (keepAliveLapsed()) for (const h of held.inOrder()) lapsed.add(h.seq);
    held.keepAlive(epoch);
    keptAliveAt = performance.now();
  }, parts.heartbeatMs);

  const release = (h: HeldMessage, how: (m: JsMsg) => void, what: string) => {
    answer(h, how, what);
    held.release(h);
  };
  const outcome = createOutcomes({ consumer: name, log, retryDelay: parts.retryDelay }, summary, {
    ack: (h) => release(h, (m) => m.ack(), 'acknowledge'),
    term: (h) => release(h, (m) => m.term(), 'terminate'),
  });
  const respond = (h: HeldMessage, msg: InboxMessage, result: InboxResult) => {
    outcome(h, msg, result);
    if (options.maxMessages !== undefined && finalOutcomes(summary) >= options.maxMessages) stop.stop();
  };

  /** One write of held messages in stream order; each is answered only after that write committed. */
  const processHeld = async (taken: HeldMessage[]): Promise<void> => {
    // a copy only for a message that failed here before: what the inbox sees is its attempt
    const msgs = taken.map((h) => (h.failures === 0 ? h.msg : { ...h.msg, deliveryCount: h.msg.deliveryCount + h.failures }));
    faults?.beforeWrite?.(msgs);
    const results = await writes.write(msgs, stop.signal, { failed: () => summary.databaseErrors++, recovered: () => roomFreed.notify() });
    if (!results) return;
    for (let k = 0; k < taken.length; k++) {
      if (crash) return;
      const result = results[k]!;
      if (result.outcome !== 'deferred') {
        try {
          await faults?.afterCommit?.(msgs[k]!, result);
        } catch (error) {
          crash = { error };
          stop.stop();
          return;
        }
      }
      respond(taken[k]!, msgs[k]!, result);
    }
  };

  const missing = createMissingDeliveries({
    consumer: name,
    log,
    giveUpMs: Math.round(pull.consumer.ackWaitMs * 1.5) + 1000,
    // the answers sent so far reach the broker before the question
    consumerInfo: async () => {
      if (!(await flushWithin(session!.nc, STOP_FLUSH_MS))) throw new Error('the broker did not confirm the answers sent so far');
      return session!.consumer.info();
    },
    readRange: (after, upTo, page) =>
      readStreamRange(
        session!.nc,
        {
          stream: pull.stream.name,
          prefix: pull.stream.prefix,
          filterSubjects: pull.consumer.filterSubjects,
          after,
          upTo,
          limit: RANGE_LIMIT,
          pageSize: RANGE_PAGE,
          expiresMs: 2000,
        },
        page,
      ),
    probe: () =>
      parts.shareProbe(() => probeStreamRead(session!.nc, { stream: pull.stream.name, filterSubjects: pull.consumer.filterSubjects, expiresMs: 2000 })),
    heldSeqs: () => new Set(held.inOrder().flatMap((h) => (h.epoch === epoch ? [h.seq] : []))),
    heldFirstHand: () => {
      const now = held.inOrder();
      lapsed = new Set(now.flatMap((h) => (lapsed.has(h.seq) ? [h.seq] : []))); // forget those answered since
      if (keepAliveLapsed()) return new Set<number>();
      return new Set(now.flatMap((h) => (h.epoch === epoch && !lapsed.has(h.seq) && h.copies.some((m) => m.info.deliveryCount === 1) ? [h.seq] : [])));
    },
    highestReceived: () => highestReceived,
    applied: parts.applied,
    recordedAs: parts.recordedAs,
    changed: () => (wake.notify(), roomFreed.notify()),
    signal: stop.signal,
  });
  /** A held message waits while an earlier message of its aggregate is awaited. */
  const blocked = (h: HeldMessage) => h.epoch === epoch && missing.blocked(h.aggregate, h.seq);

  const work = async (): Promise<void> => {
    while (!stop.signal.aborted) {
      const now = Date.now();
      missing.expire();
      const ready = held.ready(now, blocked);
      if (ready === 0) {
        const retryAt = held.nextRetryAt(now);
        const waits = [retryAt === undefined ? 60_000 : retryAt - now, missing.nextDeadlineIn() ?? 60_000];
        await wake.wait(Math.max(1, Math.min(...waits)), stop.signal);
        continue;
      }
      // A short macrotask pause lets every message of the socket read that woke us join the batch.
      if (ready < batch) await sleep(0);
      if (stop.signal.aborted) break;
      const taken = held.take(batch, Date.now(), blocked);
      if (taken.length === 0) continue;
      writing = true;
      try {
        await processHeld(taken);
      } finally {
        held.settle();
        writing = false;
        roomFreed.notify();
      }
    }
  };

  const pulling = pullMessages(
    pull,
    {
      async room() {
        for (;;) {
          if (stop.signal.aborted) return 0;
          const now = Date.now();
          // While messages are awaited or a check holds writes back, keep pulling, even with max_ack_pending reached:
          // a missing message only comes back through a pull, and their waits run down only while one is out.
          missing.expire();
          const waiting = missing.checking() || missing.awaited() > 0;
          const space = Math.max(pull.consumer.maxAckPending - held.size(), waiting ? Math.max(1, missing.awaited()) : 0);
          const allowed = options.lease?.mayPull() ?? true;
          if (allowed && writes.state() === 'ok' && space > 0 && (waiting || held.ready(now, blocked) < batch)) return Math.min(batch, space);
          await roomFreed.wait(allowed ? 1000 : 20, stop.signal);
        }
      },
      admit(m) {
        lastDelivery = Date.now();
        if (crash) return;
        if (stop.signal.aborted) {
          m.nak(); // pulled but not started: hand it back at once rather than after ack_wait
          return;
        }
        missing.delivered(m.info.streamSequence, m.info.deliverySequence);
        if (m.info.streamSequence > highestReceived) highestReceived = m.info.streamSequence;
        held.add(m, epoch);
        wake.notify();
      },
      connected(next) {
        nc = next;
      },
      ready(s) {
        const restarted = session !== undefined && s.streamCreated !== session.streamCreated;
        if (restarted) {
          epoch++;
          highestReceived = 0; // the new stream numbers its messages from 1
          if (held.size() > 0)
            log.warn('consumer: the stream was re-created; the messages held from the old one are still applied, never answered', {
              consumer: name,
              held: held.size(),
            });
        }
        session = s;
        missing.session(s.info, restarted);
      },
      pulling: missing.pulling,
      brokerState(state, error) {
        broker.set(state, error);
        missing.connected(state === 'connected');
      },
      brokerError() {
        summary.brokerErrors++;
      },
    },
    stop.signal,
  ).catch((error: unknown) => {
    fatal = { error };
    stop.stop();
  });

  try {
    const idle = { everyMs: parts.idleCheckMs, session: () => session, busy: () => writing || held.size() > 0, lastDelivery: () => lastDelivery };
    await Promise.all([work(), pulling, options.untilIdle ? stopWhenIdle(idle, stop) : undefined]);
  } finally {
    clearInterval(heartbeat);
    stop.dispose();
    if (!crash) {
      // Handed back in stream order, so they come back in that order.
      for (const h of held.inOrder()) answer(h, (m) => m.nak(), 'hand the message back');
      // the answers reach the broker before the connection closes; a broker that does not answer within
      // STOP_FLUSH_MS gets them back after ack_wait instead of holding up the stop
      if (nc) await flushWithin(nc, STOP_FLUSH_MS);
    }
    await nc?.close().catch(() => undefined);
  }
  if (fatal) throw fatal.error;
  if (crash) throw crash.error;
  return summary;
}
