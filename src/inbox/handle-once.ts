import type { Tx } from '../db/open-database.ts';
import type { Writer } from '../db/writer.ts';
import type { IntegrationEvent } from '../events/integration-event.ts';
import type { EventRegistry } from '../events/registry.ts';
import { decodeMessage, type InboxMessage } from './inbox-message.ts';
import type { InboxMetrics } from './inbox-metrics.ts';
import { insertInboxRow, storeDeadLetter } from './inbox-store.ts';
import type { SubscriberHandler } from './subscriber.ts';

/** What one subscriber needs to apply messages exactly once to its own database. */
export type InboxDeps = {
  /** The subscriber's name: the inbox `consumer` column and metrics label. */
  consumer: string;
  /** The write queue of the subscriber's database (concurrent calls share one commit, each in a savepoint). */
  writer: Writer;
  registry: EventRegistry;
  handle: SubscriberHandler;
  clock: () => Date;
  metrics: InboxMetrics;
  /** The consumer's max_deliver: a handler failure on this delivery (or later) dead-letters the message. */
  maxDeliver: number;
};

/** What happened to a message; the caller acks `processed`/`duplicate`, naks `retry` with a delay, terms `dead-lettered`. */
export type InboxResult =
  | { outcome: 'processed'; eventId: string }
  | { outcome: 'duplicate'; eventId: string }
  | { outcome: 'dead-lettered'; eventId: string; error: string }
  | { outcome: 'retry'; eventId: string; error: string };

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
  const fresh = await insertInboxRow(tx, {
    eventId: event.eventId,
    consumer: deps.consumer,
    messageType: event.type,
    receivedAt: deps.clock().getTime(),
  });
  if (fresh) await deps.handle(tx, event);
  return fresh;
}

/**
 * Processes one delivered message exactly once for `deps.consumer` and resolves only after its transaction
 * committed, so the caller may ack then. Messages that can never be applied (not JSON, unregistered type, invalid
 * payload) are dead-lettered at once; a handler failure rolls back the inbox row and the effect together and asks
 * for a retry, until the delivery count reaches maxDeliver, when the message is dead-lettered with the error.
 * The write is queued synchronously, so calls made in delivery order are applied in that order.
 */
export async function handleOnce(deps: InboxDeps, msg: InboxMessage): Promise<InboxResult> {
  const decoded = decodeMessage(deps.registry, msg);
  if (!decoded.ok) return deadLetter(deps, msg, decoded.eventId, decoded.error);
  const { event } = decoded;
  let fresh: boolean;
  try {
    fresh = await deps.writer.write((tx) => applyOnce(tx, deps, event));
  } catch (error) {
    const reason = describeError(error);
    if (msg.deliveryCount < deps.maxDeliver) return { outcome: 'retry', eventId: event.eventId, error: reason };
    return deadLetter(deps, msg, event.eventId, `failed on ${msg.deliveryCount} deliveries (max_deliver ${deps.maxDeliver}); last error: ${reason}`);
  }
  const labels = { consumer: deps.consumer };
  if (fresh) deps.metrics.processed.inc(labels);
  else deps.metrics.duplicates.inc(labels);
  return { outcome: fresh ? 'processed' : 'duplicate', eventId: event.eventId };
}

/**
 * Stores the message as a dead letter. If even that write fails, the message is handed back for a retry: losing
 * the copy would lose the event for this subscriber.
 */
async function deadLetter(deps: InboxDeps, msg: InboxMessage, eventId: string, error: string): Promise<InboxResult> {
  try {
    await deps.writer.write((tx) => storeDeadLetter(tx, { eventId, consumer: deps.consumer, msg, error, deadAt: deps.clock().getTime() }));
  } catch (writeError) {
    return { outcome: 'retry', eventId, error: `${error}; storing the dead letter failed: ${describeError(writeError)}` };
  }
  deps.metrics.deadLetters.inc({ consumer: deps.consumer });
  return { outcome: 'dead-lettered', eventId, error };
}
