import { jetstream, jetstreamManager, type Consumer, type JsMsg } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Database } from '../db/open-database.ts';
import { createWriter, type Writer } from '../db/writer.ts';
import type { EventRegistry } from '../events/registry.ts';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics/metrics.ts';
import type { ConnectNats } from '../nats/connect.ts';
import { ensureConsumer, UnsafeConsumerConfigError, type ConsumerSettings } from '../nats/ensure-consumer.ts';
import { ensureStream, UnsafeStreamConfigError } from '../nats/ensure-stream.ts';
import type { StreamSettings } from '../nats/stream-settings.ts';
import { backoffDelay } from '../outbox/backoff.ts';
import type { BrokerState } from '../outbox/relay.ts';
import { createInboxDeps, DEFAULT_MAX_DELIVER, describeError, handleBatch, type InboxDeps, type InboxResult } from './handle-once.ts';
import { toInboxMessage, type InboxMessage } from './inbox-message.ts';
import type { Subscriber } from './subscriber.ts';

/** Test-only fault injection at the consumer's dangerous point. */
export type ConsumerFaults = {
  /**
   * Runs after a message's transaction committed and before it is acknowledged. Throwing simulates a crash
   * there: nothing more is acknowledged, the runner stops and `run` rejects with the error.
   */
  afterCommit?(msg: InboxMessage, result: InboxResult): void | Promise<void>;
};

export type ConsumerRunnerOptions = Subscriber & {
  /** The subscriber's own database (never the service's). */
  db: Database;
  /** Its write queue; created over `db` when omitted. Share it with compaction and replay (one queue per database). */
  writer?: Writer;
  registry: EventRegistry;
  log: Logger;
  /** Registry the inbox counters are registered on. */
  metrics: Metrics;
  connect: ConnectNats;
  /** The same stream settings as the relay: the runner creates the stream when it starts first. */
  stream: StreamSettings;
  clock?: () => Date;
  /** Default 30 000. */
  ackWaitMs?: number;
  /** Default 10; the consumer's max_deliver and the inbox's dead-letter threshold. */
  maxDeliver?: number;
  /** First nak delay of a failing message (default 1000), doubled per delivery up to maxNakDelayMs (default 30 000). */
  nakDelayMs?: number;
  maxNakDelayMs?: number;
  /** Most messages pulled ahead and processed in one write transaction (default 256). */
  batch?: number;
  /** Back-off while the broker is unreachable: base (default 1000) doubling up to max (default 30 000). */
  backoffBaseMs?: number;
  maxBackoffMs?: number;
  /** How often an `untilIdle` run asks the broker whether anything is left (default 250). */
  idleCheckMs?: number;
  random?: () => number;
  faults?: ConsumerFaults;
  /** Replaces handleBatch; only for the benchmark that measures what the inbox costs. */
  processBatch?: (msgs: InboxMessage[]) => Promise<InboxResult[]>;
};

export type ConsumerRunOptions = {
  /** Stops pulling when aborted; messages in flight finish and are acknowledged after their commit. */
  signal?: AbortSignal;
  timeLimitMs?: number;
  /** Stops once this many messages reached a final outcome (processed, duplicate or dead-lettered). */
  maxMessages?: number;
  /** Stops once the consumer has nothing pending and nothing awaiting acknowledgement (bounded runs, tests). */
  untilIdle?: boolean;
};

export type ConsumerRunSummary = { processed: number; duplicates: number; deadLettered: number; retried: number; brokerErrors: number };

/** A subscriber's worker; `run` loops until stopped and resolves with what it did. */
export type ConsumerRunner = {
  name: string;
  run(options?: ConsumerRunOptions): Promise<ConsumerRunSummary>;
  state(): BrokerState;
  /** What handleOnce and replayDeadLetters need for this subscriber (same writer, metrics and max_deliver). */
  inbox: InboxDeps;
};

/**
 * Creates a subscriber's consumer loop: connect (retrying with back-off), ensure the stream and the durable pull
 * consumer, then hand the messages that arrived together (up to `batch`) to handleBatch, one write per batch, in
 * delivery order. Each message is acked only after that commit, nak'ed with a growing delay on `retry`, terminated
 * once dead-lettered. The durable consumer keeps the place across restarts of either side; the nats connection
 * reconnects by itself and the pull resumes. A stop finishes the batch being written, acks it, and naks what was
 * pulled but not started. An unsafe stream or consumer configuration is fatal: `run` rejects.
 */
export function createConsumerRunner(o: ConsumerRunnerOptions): ConsumerRunner {
  const batch = o.batch ?? 256;
  const ackWaitMs = o.ackWaitMs ?? 30_000;
  const maxDeliver = o.maxDeliver ?? DEFAULT_MAX_DELIVER;
  const nakDelayMs = o.nakDelayMs ?? 1000;
  const maxNakDelayMs = o.maxNakDelayMs ?? 30_000;
  const backoff = { baseMs: o.backoffBaseMs ?? 1000, maxMs: o.maxBackoffMs ?? 30_000, random: o.random };
  const idleCheckMs = o.idleCheckMs ?? 250;
  const inbox = createInboxDeps(o, {
    writer: o.writer ?? createWriter(o.db),
    registry: o.registry,
    metrics: o.metrics,
    maxDeliver,
    ...(o.clock ? { clock: o.clock } : {}),
  });
  const processBatch = o.processBatch ?? ((msgs: InboxMessage[]) => handleBatch(inbox, msgs));
  const consumerSettings: ConsumerSettings = {
    stream: o.stream.name,
    name: o.name,
    filterSubjects: o.aggregateTypes.map((t) => `${o.stream.prefix}.${t}.>`),
    ackWaitMs,
    maxDeliver,
    maxAckPending: Math.max(1000, 4 * batch),
  };
  let brokerState: BrokerState = 'connecting';
  const setState = (next: BrokerState, error?: unknown) => {
    if (next === brokerState) return;
    brokerState = next;
    if (next === 'unavailable') o.log.warn('consumer: broker unavailable, backing off', { consumer: o.name, error: describeError(error) });
    else if (next === 'connected') o.log.info('consumer: consuming', { consumer: o.name, stream: o.stream.name });
  };

  return {
    name: o.name,
    inbox,
    state: () => brokerState,
    async run(options = {}) {
      const summary: ConsumerRunSummary = { processed: 0, duplicates: 0, deadLettered: 0, retried: 0, brokerErrors: 0 };
      const stop = new AbortController();
      const onAbort = () => stop.abort();
      options.signal?.addEventListener('abort', onAbort, { once: true });
      if (options.signal?.aborted) stop.abort();
      const timeLimit = options.timeLimitMs !== undefined ? setTimeout(onAbort, options.timeLimitMs) : undefined;
      /** Set by a fault that simulates a crash: nothing is acknowledged afterwards. */
      let crash: { error: unknown } | undefined;
      let outage = 0;

      /** Answers the broker after the commit. An answer lost with the connection only means a redelivery. */
      const respond = (m: JsMsg, msg: InboxMessage, result: InboxResult) => {
        const send = (answer: () => void) => {
          try {
            answer();
          } catch (error) {
            o.log.warn('consumer: could not answer the broker; the message will be redelivered', { consumer: o.name, eventId: result.eventId, error: describeError(error) });
          }
        };
        switch (result.outcome) {
          case 'processed':
          case 'duplicate':
            send(() => m.ack());
            if (result.outcome === 'processed') summary.processed++;
            else summary.duplicates++;
            break;
          case 'retry': {
            const delay = backoffDelay(msg.deliveryCount, { baseMs: nakDelayMs, maxMs: maxNakDelayMs, random: o.random });
            send(() => m.nak(delay));
            summary.retried++;
            o.log.warn('consumer: message failed, will be redelivered', { consumer: o.name, eventId: result.eventId, deliveries: msg.deliveryCount, delayMs: delay, error: result.error });
            break;
          }
          case 'dead-lettered':
            send(() => m.term());
            summary.deadLettered++;
            o.log.warn('consumer: message dead-lettered', { consumer: o.name, eventId: result.eventId, deliveries: msg.deliveryCount, error: result.error });
            break;
        }
        const final = summary.processed + summary.duplicates + summary.deadLettered;
        if (options.maxMessages !== undefined && final >= options.maxMessages) stop.abort();
      };

      /** Processes messages in delivery order in one write; each is answered only after that write committed. */
      const processMessages = async (batchMsgs: JsMsg[]): Promise<void> => {
        const msgs = batchMsgs.map(toInboxMessage);
        let results: InboxResult[];
        try {
          results = await processBatch(msgs);
        } catch (error) {
          results = msgs.map((m) => ({ outcome: 'retry', eventId: m.fallbackId, error: describeError(error) }));
        }
        for (let k = 0; k < msgs.length; k++) {
          if (crash) return;
          try {
            await o.faults?.afterCommit?.(msgs[k]!, results[k]!);
          } catch (error) {
            crash = { error };
            stop.abort();
            return;
          }
          respond(batchMsgs[k]!, msgs[k]!, results[k]!);
        }
      };

      /** One connection's worth of consuming; returns when stopped, throws when the broker side gives up. */
      const consumeSession = async (nc: NatsConnection, consumer: Consumer): Promise<void> => {
        const messages = await consumer.consume({ max_messages: batch, abort_on_missing_resource: true });
        const closeOnStop = () => void messages.close();
        stop.signal.addEventListener('abort', closeOnStop, { once: true });
        if (stop.signal.aborted) closeOnStop();
        const waiting: JsMsg[] = [];
        let working: Promise<void> | undefined;
        let lastDelivery = Date.now();
        const sessionEnd = new AbortController();
        const sessionOver = AbortSignal.any([stop.signal, sessionEnd.signal]);
        const idleWatch = options.untilIdle ? watchIdle() : undefined;

        // Takes up to `batch` waiting messages at a time, until stopped. A short macrotask pause first lets every
        // message of the socket read that woke us join the batch, instead of the first one committing alone.
        async function work(): Promise<void> {
          await null; // never settle synchronously: `working` is assigned before it is cleared below
          while (waiting.length > 0 && !crash && !stop.signal.aborted) {
            if (waiting.length < batch) await new Promise((r) => setTimeout(r, 0));
            await processMessages(waiting.splice(0, batch));
          }
          working = undefined;
        }

        async function watchIdle(): Promise<void> {
          while (!sessionOver.aborted) {
            await sleep(idleCheckMs, sessionOver);
            if (sessionOver.aborted || working || waiting.length > 0 || Date.now() - lastDelivery < idleCheckMs) continue;
            try {
              await nc.flush();
              const info = await consumer.info();
              if (info.num_pending === 0 && info.num_ack_pending === 0 && !working && waiting.length === 0) stop.abort();
            } catch {
              // The broker is away; the session notices on its own. Ask again later.
            }
          }
        }

        try {
          for await (const m of messages) {
            lastDelivery = Date.now();
            if (crash) continue;
            if (stop.signal.aborted) {
              m.nak(); // pulled but not started: hand it back at once rather than after ack_wait
              continue;
            }
            waiting.push(m);
            if (!working) working = work();
            // Back-pressure: at most one batch waits while another is being written.
            while (waiting.length >= batch && working) await working;
          }
        } finally {
          stop.signal.removeEventListener('abort', closeOnStop);
          await working;
          if (!crash) for (const m of waiting.splice(0)) m.nak();
          lastDelivery = Date.now();
          if (!crash) await nc.flush().catch(() => undefined); // the acks reach the broker before the connection closes
          if (!stop.signal.aborted) void messages.close();
          sessionEnd.abort();
          await idleWatch;
        }
        if (!stop.signal.aborted) throw new Error('the consumer stopped delivering messages');
      };

      try {
        while (!stop.signal.aborted) {
          let nc: NatsConnection | undefined;
          try {
            nc = await o.connect();
            const jsm = await jetstreamManager(nc);
            await ensureStream(jsm, o.stream);
            await ensureConsumer(jsm, consumerSettings);
            const consumer = await jetstream(nc).consumers.get(o.stream.name, o.name);
            outage = 0;
            setState('connected');
            void followConnection(nc, setState);
            await consumeSession(nc, consumer);
          } catch (error) {
            if (error instanceof UnsafeStreamConfigError || error instanceof UnsafeConsumerConfigError) throw error;
            if (crash) break;
            outage++;
            summary.brokerErrors++;
            setState('unavailable', error);
          } finally {
            await nc?.close().catch(() => undefined);
          }
          if (crash) break;
          if (!stop.signal.aborted) await sleep(backoffDelay(outage, backoff), stop.signal);
        }
      } finally {
        if (timeLimit) clearTimeout(timeLimit);
        options.signal?.removeEventListener('abort', onAbort);
      }
      if (crash) throw crash.error;
      return summary;
    },
  };
}

/** Mirrors the connection's own reconnects into the runner's state, for /ready. */
async function followConnection(nc: NatsConnection, setState: (s: BrokerState, error?: unknown) => void): Promise<void> {
  for await (const s of nc.status()) {
    if (s.type === 'disconnect') setState('unavailable', 'disconnected');
    else if (s.type === 'reconnect') setState('connected');
  }
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
