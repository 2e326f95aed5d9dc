import { isInfrastructureError } from '../db/infrastructure-error.ts';
import type { Tx } from '../db/open-database.ts';
import type { Writer } from '../db/writer.ts';
import type { IntegrationEvent } from '../events/integration-event.ts';
import type { EventRegistry } from '../events/registry.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { decodeMessage, type InboxMessage } from './inbox-message.ts';
import { createInboxMetrics, type InboxMetrics } from './inbox-metrics.ts';
import { claimInboxRows, insertInboxRow, storeDeadLetter } from './inbox-store.ts';
import type { Subscriber, SubscriberHandler } from './subscriber.ts';

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
};

/** InboxDeps of `subscriber` (for handleOnce, replayDeadLetters, a CLI) with the counters registered on `metrics`. */
export function createInboxDeps(
  subscriber: Subscriber,
  parts: { writer: Writer; registry: EventRegistry; metrics: Metrics; clock?: () => Date; maxDeliver?: number },
): InboxDeps {
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
    metrics: createInboxMetrics(parts.metrics),
    maxDeliver: parts.maxDeliver ?? DEFAULT_MAX_DELIVER,
  };
}

/**
 * What happened to a message; the caller acks `processed`/`duplicate`, terms `dead-lettered`, tries `retry` again
 * after a delay, and keeps `deferred` (not attempted) until the earlier message of its subject is settled.
 */
export type InboxResult =
  | { outcome: 'processed'; eventId: string }
  | { outcome: 'duplicate'; eventId: string }
  | { outcome: 'ignored'; eventId: string }
  | { outcome: 'dead-lettered'; eventId: string; error: string }
  | { outcome: 'retry'; eventId: string; error: string }
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
export async function applyOnce(tx: Tx, deps: Pick<InboxDeps, 'consumer' | 'handle' | 'clock'>, event: IntegrationEvent): Promise<boolean> {
  const fresh = await insertInboxRow(tx, { eventId: event.eventId, consumer: deps.consumer, messageType: event.type, receivedAt: deps.clock().getTime() });
  if (fresh) await deps.handle(tx, event);
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

type Valid = { i: number; msg: InboxMessage; event: IntegrationEvent };
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
 * Processes delivered messages exactly once for `deps.consumer`, in the order given, and resolves (one result per
 * message, same order) only after the transaction that holds their outcome committed, so the caller may ack then:
 * - the inbox rows of the whole batch are claimed with multi-row inserts and the handler runs for the new events,
 *   all in ONE write (no savepoint per message: the common case costs one statement per event plus its effect);
 * - an event already in the inbox is a `duplicate` (acked, not applied again);
 * - a registered event of a type the subscriber does not apply is `ignored` (acked, no inbox row, not counted);
 * - a body that is not JSON, an unregistered type or an invalid payload is stored as a dead letter at once;
 * - a handler that throws rolls back the whole attempt; that message comes back as `retry` (or, on attempt
 *   maxDeliver, is dead-lettered with the error), the later messages of its subject (its aggregate) as `deferred`,
 *   and the rest are attempted again without them, so a failed attempt never leaves an inbox row or a partial
 *   effect behind and no event overtakes an earlier one of its aggregate;
 * - a handler error that is an infrastructure error of the database (isInfrastructureError), and any failure
 *   to write or commit, rejects: nothing of the batch committed and no message is charged with a failure; the
 *   caller tries the same messages again once the database takes writes.
 * The first write is queued synchronously, so batches handed over in delivery order are applied in that order.
 */
export async function handleBatch(deps: InboxDeps, msgs: InboxMessage[]): Promise<InboxResult[]> {
  const results: InboxResult[] = new Array(msgs.length);
  let rest: Valid[] = [];
  const doomed: Doomed[] = [];
  msgs.forEach((msg, i) => {
    const decoded = decodeMessage(deps.registry, msg);
    if (decoded.ok && !deps.handles(decoded.event.type)) results[i] = { outcome: 'ignored', eventId: decoded.event.eventId };
    else if (decoded.ok) rest.push({ i, msg, event: decoded.event });
    else doomed.push({ i, msg, eventId: decoded.eventId, error: decoded.error });
  });

  while (rest.length > 0 || doomed.length > 0) {
    let fresh: Set<number>;
    try {
      fresh = await deps.writer.write((tx) => attempt(tx, deps, rest, doomed));
    } catch (error) {
      if (!(error instanceof HandlerFailed)) throw error;
      const failed = rest[error.index]!;
      const behind = (r: Valid, k: number) => k > error.index && r.msg.subject === failed.msg.subject;
      rest.forEach((r, k) => {
        if (behind(r, k)) results[r.i] = { outcome: 'deferred', eventId: r.event.eventId };
      });
      rest = rest.filter((r, k) => k !== error.index && !behind(r, k));
      if (failed.msg.deliveryCount < deps.maxDeliver) {
        results[failed.i] = { outcome: 'retry', eventId: failed.event.eventId, error: error.message };
      } else {
        const final = `failed on ${failed.msg.deliveryCount} deliveries (max_deliver ${deps.maxDeliver}); last error: ${error.message}`;
        doomed.push({ i: failed.i, msg: failed.msg, eventId: failed.event.eventId, error: final });
      }
      continue;
    }
    const labels = { consumer: deps.consumer };
    rest.forEach((r, k) => {
      const applied = fresh.has(k);
      results[r.i] = { outcome: applied ? 'processed' : 'duplicate', eventId: r.event.eventId };
      (applied ? deps.metrics.processed : deps.metrics.duplicates).inc(labels);
    });
    for (const d of doomed) {
      results[d.i] = { outcome: 'dead-lettered', eventId: d.eventId, error: d.error };
      deps.metrics.deadLetters.inc(labels);
    }
    break;
  }
  return results;
}

/** One all-or-nothing pass: dead letters, inbox claims, then the handler for each new event in order. */
async function attempt(tx: Tx, deps: InboxDeps, rest: Valid[], doomed: Doomed[]): Promise<Set<number>> {
  const now = deps.clock().getTime();
  for (const d of doomed) await storeDeadLetter(tx, { eventId: d.eventId, consumer: deps.consumer, msg: d.msg, error: d.error, deadAt: now });
  const claimed = await claimInboxRows(
    tx,
    deps.consumer,
    rest.map((r) => ({ eventId: r.event.eventId, messageType: r.event.type })),
    now,
  );
  const fresh = new Set<number>();
  for (let k = 0; k < rest.length; k++) {
    const { event } = rest[k]!;
    if (!claimed.delete(event.eventId)) continue; // applied before, or an earlier copy in this batch
    fresh.add(k);
    try {
      await deps.handle(tx, event);
    } catch (error) {
      if (isInfrastructureError(error)) throw error; // the database failed, not the handler: nobody is charged
      throw new HandlerFailed(k, error);
    }
  }
  return fresh;
}
