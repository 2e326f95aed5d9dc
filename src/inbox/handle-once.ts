import { traceFields } from '../telemetry/trace-context.ts';
import { type Logger, silentLogger, withFields } from '../logger.ts';
import { type Span, type SpanContext, type Tracer, trace } from '@opentelemetry/api';
import { isInfrastructureError } from '../db/infrastructure-error.ts';
import type { Tx } from '../db/open-database.ts';
import type { Writer } from '../db/writer.ts';
import type { IntegrationEvent } from '../events/integration-event.ts';
import type { EventRegistry } from '../events/registry.ts';
import { TRACER_NAME } from '../deps.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { aggregateOf, decodeMessage, type InboxMessage } from './inbox-message.ts';
import { createInboxMetrics, type InboxMetrics, startInboxCounters } from './inbox-metrics.ts';
import { claimInboxRows, insertInboxRow, storeDeadLetter } from './inbox-store.ts';
import { endMessageSpan, failSpan, runInSpan, startMessageSpan } from './message-span.ts';
import type { HandlerContext, Subscriber, SubscriberHandler } from './subscriber.ts';

/** A failing handler is tried this many times (counted from the message's deliveries) before the inbox dead-letters it. */
export const DEFAULT_MAX_DELIVER = 10;

/** What one subscriber needs to apply messages exactly once to its own database. */
export type InboxDeps = {
  /** The subscriber's name: the inbox `consumer` column and metrics label. */
  consumer: string;
  /** The write queue of the subscriber's database (one per database per process). */
  writer: Writer;
  registry: EventRegistry;
  handle: SubscriberHandler;
  /** True for the event types the subscriber applies; other registered types are acknowledged untouched. */
  handles: (type: string) => boolean;
  clock: () => Date;
  metrics: InboxMetrics;
  /** The consumer's max_deliver: a handler failure on this attempt (or later) dead-letters the message. */
  maxDeliver: number;
  /** Starts each message's CONSUMER span. */
  tracer: Tracer;
  /** What handlers log through (their `ctx.log`, with the span's trace ids added). */
  log: Logger;
  /** The durable consumer's name: the spans' `messaging.consumer.group.name`. */
  durableName: string;
};

/**
 * InboxDeps of `subscriber` (for handleOnce, replayDeadLetters, a CLI) with its counters registered on `metrics` and
 * started at 0; spans through `tracer` (default: the global OpenTelemetry tracer) named after `durableName` (default:
 * the subscriber's name).
 */
export function createInboxDeps(
  subscriber: Subscriber,
  parts: {
    writer: Writer;
    registry: EventRegistry;
    metrics: Metrics;
    clock?: () => Date;
    maxDeliver?: number;
    tracer?: Tracer;
    durableName?: string;
    log?: Logger;
  },
): InboxDeps {
  const metrics = createInboxMetrics(parts.metrics);
  startInboxCounters(metrics, subscriber.name);
  return {
    consumer: subscriber.name,
    writer: parts.writer,
    registry: parts.registry,
    handle: subscriber.handle,
    handles: (
      (types) => (type: string) =>
        types.has(type)
    )(new Set(subscriber.types)),
    clock: parts.clock ?? (() => new Date()),
    metrics,
    maxDeliver: parts.maxDeliver ?? DEFAULT_MAX_DELIVER,
    tracer: parts.tracer ?? trace.getTracer(TRACER_NAME),
    durableName: parts.durableName ?? subscriber.name,
    log: parts.log ?? silentLogger,
  };
}

/**
 * What happened to a message; the caller acks `processed`/`duplicate`, terms `dead-lettered`, tries `retry` again
 * after a delay, and keeps `deferred` (not attempted) until the earlier message of its aggregate is settled. A failure
 * carries the context of the message's span (`span`), for the caller's log line about it.
 */
export type InboxResult =
  | { outcome: 'processed'; eventId: string }
  | { outcome: 'duplicate'; eventId: string }
  | { outcome: 'ignored'; eventId: string }
  | { outcome: 'dead-lettered'; eventId: string; error: string; span?: SpanContext }
  | { outcome: 'retry'; eventId: string; error: string; span?: SpanContext }
  | { outcome: 'deferred'; eventId: string };

export type InboxOutcome = InboxResult['outcome'];

/** Error text for logs and dead letters, including a wrapped cause (drizzle wraps driver errors). */
export function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error && !error.message.includes(error.cause.message) ? `: ${error.cause.message}` : '';
  return `${error.message}${cause}`;
}

/**
 * Claims the event in the inbox and, when it is new, applies it with the subscriber's handler, in the caller's
 * transaction. Returns false (and applies nothing) when the event was applied before. Must be part of the
 * transaction that commits the effect.
 */
export async function applyOnce(tx: Tx, deps: Pick<InboxDeps, 'consumer' | 'handle' | 'clock' | 'log'>, event: IntegrationEvent): Promise<boolean> {
  const fresh = await insertInboxRow(tx, { eventId: event.eventId, consumer: deps.consumer, messageType: event.type, receivedAt: deps.clock().getTime() });
  if (fresh) await deps.handle(tx, event, { log: deps.log });
  return fresh;
}

/**
 * Processes one delivered message exactly once for `deps.consumer` and resolves only after its transaction
 * committed, so the caller may ack then. See handleBatch for the rules.
 */
export async function handleOnce(deps: InboxDeps, msg: InboxMessage): Promise<InboxResult> {
  const [result] = await handleBatch(deps, [msg]);
  return result!;
}

/** A decodable message of a handled type; `fresh` is what the latest attempt's inbox claim found (new or not). */
type Valid = { i: number; msg: InboxMessage; event: IntegrationEvent; span: Span; fresh?: boolean };
type Doomed = { i: number; msg: InboxMessage; eventId: string; error: string };

/** The handler of `rest[index]` threw: the pass is rolled back and that message leaves the batch. */
class HandlerFailed extends Error {
  constructor(
    readonly index: number,
    readonly failure: unknown,
  ) {
    super(describeError(failure));
  }
}

/**
 * The id `msg` is recorded under once handled: its inbox row, or its dead letter when it cannot be decoded; undefined
 * for an event of a type the subscriber ignores (acknowledged, no row). Pure, as handleBatch decides it.
 */
export function recordedAs(deps: Pick<InboxDeps, 'registry' | 'handles'>, msg: InboxMessage): string | undefined {
  const decoded = decodeMessage(deps.registry, msg);
  if (!decoded.ok) return decoded.eventId;
  return deps.handles(decoded.event.type) ? decoded.event.eventId : undefined;
}

/** How handleBatch applies a batch; only the consume benchmark's baseline and the torture run's broken variant set it. */
export type BatchOptions = {
  /** Skips the inbox claim: every event counts as new, so a redelivered one takes effect again (see applyWithoutInbox). */
  withoutInbox?: boolean;
};

/**
 * Processes delivered messages exactly once for `deps.consumer`, in the order given, and resolves (one result per
 * message, same order) only after the transaction that holds their outcome committed, so the caller may ack then:
 * - the inbox rows of the whole batch are claimed with multi-row inserts and the handler runs for the new events,
 *   all in ONE write (no savepoint per message: the common case costs one statement per event plus its effect);
 * - an event already in the inbox is a `duplicate` (acked, not applied again);
 * - a registered event of a type the subscriber does not apply is `ignored` (acked, no inbox row);
 * - a body that is not JSON, an unregistered type or an invalid payload is stored as a dead letter at once;
 * - a handler that throws rolls back the whole attempt; that message comes back as `retry` (or, on attempt
 *   maxDeliver, is dead-lettered with the error), the later messages of its aggregate (aggregateOf, whatever their subjects) as `deferred`,
 *   and the rest are attempted again without them, so a failed attempt never leaves an inbox row or a partial
 *   effect behind and no event overtakes an earlier one of its aggregate;
 * - a handler error that is an infrastructure error of the database (isInfrastructureError), and any failure
 *   to write or commit, rejects: nothing of the batch committed and no message is charged with a failure; the
 *   caller tries the same messages again once the database takes writes.
 * Each message gets a CONSUMER span (see startMessageSpan), active while its handler runs and ended with its
 * outcome once the write is over: after the commit, or — when the write rejects — as a `retry` with ERROR status
 * (the next call starts new spans). Each handler call is timed in `inbox_handler_duration_seconds`.
 * The first write is queued synchronously, so batches handed over in delivery order are applied in that order.
 */
export async function handleBatch(deps: InboxDeps, msgs: InboxMessage[], options: BatchOptions = {}): Promise<InboxResult[]> {
  const results: InboxResult[] = new Array(msgs.length);
  const spans: Span[] = new Array(msgs.length);
  let rest: Valid[] = [];
  const doomed: Doomed[] = [];
  msgs.forEach((msg, i) => {
    const decoded = decodeMessage(deps.registry, msg);
    const span = startMessageSpan(deps.tracer, msg, decoded.ok ? decoded.event : { eventId: decoded.eventId }, deps.durableName);
    spans[i] = span;
    if (decoded.ok && !deps.handles(decoded.event.type)) results[i] = { outcome: 'ignored', eventId: decoded.event.eventId };
    else if (decoded.ok) rest.push({ i, msg, event: decoded.event, span });
    else {
      failSpan(span, undefined, decoded.error);
      doomed.push({ i, msg, eventId: decoded.eventId, error: decoded.error });
    }
  });

  try {
    while (rest.length > 0 || doomed.length > 0) {
      try {
        await deps.writer.write((tx) => attempt(tx, deps, rest, doomed, options));
        break;
      } catch (error) {
        if (!(error instanceof HandlerFailed)) throw error;
        const failed = rest[error.index]!;
        failSpan(failed.span, error.failure, error.message);
        const behind = (r: Valid, k: number) => k > error.index && aggregateOf(r.msg) === aggregateOf(failed.msg);
        rest.forEach((r, k) => {
          if (behind(r, k)) results[r.i] = { outcome: 'deferred', eventId: r.event.eventId };
          else if (k !== error.index) r.span.addEvent('inbox.attempt_rolled_back', { 'inbox.failed_message.id': failed.event.eventId });
        });
        rest = rest.filter((r, k) => k !== error.index && !behind(r, k));
        if (failed.msg.deliveryCount < deps.maxDeliver) {
          results[failed.i] = { outcome: 'retry', eventId: failed.event.eventId, error: error.message, span: failed.span.spanContext() };
        } else {
          const final = `failed on ${failed.msg.deliveryCount} deliveries (max_deliver ${deps.maxDeliver}); last error: ${error.message}`;
          doomed.push({ i: failed.i, msg: failed.msg, eventId: failed.event.eventId, error: final });
        }
      }
    }
  } catch (error) {
    // nothing committed: every span of this call ends as a failed attempt; the caller writes the batch again
    for (const span of spans) {
      failSpan(span, error, `the write failed: ${describeError(error)}`);
      endMessageSpan(span, 'retry');
    }
    throw error;
  }
  for (const r of rest) results[r.i] = { outcome: r.fresh ? 'processed' : 'duplicate', eventId: r.event.eventId };
  for (const d of doomed) results[d.i] = { outcome: 'dead-lettered', eventId: d.eventId, error: d.error, span: spans[d.i]!.spanContext() };
  // each counter once per batch (by how many), not once per message
  let processed = 0;
  let duplicates = 0;
  let ignored = 0;
  let deadLetters = 0;
  for (let i = 0; i < results.length; i++) {
    const outcome = results[i]!.outcome;
    if (outcome === 'processed') processed++;
    else if (outcome === 'duplicate') duplicates++;
    else if (outcome === 'ignored') ignored++;
    else if (outcome === 'dead-lettered') deadLetters++;
    endMessageSpan(spans[i]!, outcome);
  }
  const labels = { consumer: deps.consumer };
  if (processed > 0) deps.metrics.processed.inc(labels, processed);
  if (duplicates > 0) deps.metrics.duplicates.inc(labels, duplicates);
  if (ignored > 0) deps.metrics.ignored.inc(labels, ignored);
  if (deadLetters > 0) deps.metrics.deadLetters.inc(labels, deadLetters);
  return results;
}

/**
 * What a handler gets as its context: `log` names the message's span, its logger made only when the handler reads
 * it (most handlers log nothing, and a subscriber calls its handler once per event). A class: its getter lives on
 * the prototype instead of being defined again on each context.
 */
class LazyHandlerContext implements HandlerContext {
  readonly #base: Logger;
  readonly #span: Span;
  #log: Logger | undefined;
  constructor(base: Logger, span: Span) {
    this.#base = base;
    this.#span = span;
  }
  get log(): Logger {
    return (this.#log ??= withFields(this.#base, traceFields(this.#span.spanContext())));
  }
}

/**
 * One all-or-nothing pass: dead letters, inbox claims, then the handler for each new event in order, with its span
 * active. Sets each message's `fresh`: false for an event claimed before (or by an earlier copy in this batch).
 */
async function attempt(tx: Tx, deps: InboxDeps, rest: Valid[], doomed: Doomed[], options: BatchOptions): Promise<void> {
  const now = deps.clock().getTime();
  for (const d of doomed) await storeDeadLetter(tx, { eventId: d.eventId, consumer: deps.consumer, msg: d.msg, error: d.error, deadAt: now });
  const claimed = options.withoutInbox
    ? undefined
    : await claimInboxRows(
        tx,
        deps.consumer,
        rest.map((r) => ({ eventId: r.event.eventId, messageType: r.event.type })),
        now,
      );
  // the consumer's series, looked up once per attempt (and only once a handler runs: a labelled histogram shows no
  // series before its first observation)
  let duration: { observe(value: number): void } | undefined;
  for (let k = 0; k < rest.length; k++) {
    const r = rest[k]!;
    // false: applied before, or an earlier copy in this batch; without the inbox, every copy is new
    r.fresh = claimed ? claimed.delete(r.event.eventId) : true;
    if (!r.fresh) continue;
    const started = performance.now();
    try {
      await runInSpan(r.span, () => deps.handle(tx, r.event, new LazyHandlerContext(deps.log, r.span)));
    } catch (error) {
      if (isInfrastructureError(error)) throw error; // the database failed, not the handler: nobody is charged
      throw new HandlerFailed(k, error);
    } finally {
      (duration ??= deps.metrics.handlerDuration.series({ consumer: deps.consumer })).observe((performance.now() - started) / 1000);
    }
  }
}
