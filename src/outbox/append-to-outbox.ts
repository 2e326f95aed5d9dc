import { sqlOf, type Tx } from '../db/open-database.ts';
import type { IntegrationEvent } from '../events/integration-event.ts';
import type { EventRegistry } from '../events/registry.ts';

/** Metadata carried to the broker as message headers (W3C trace context, correlation id). */
export type OutboxHeaders = { traceparent?: string; correlationId?: string };

/**
 * Stores integration events as `pending` outbox rows. Must be called inside the command's write transaction
 * (`tx`): it never commits, so the rows become visible together with the state change or not at all.
 * Throws (and so aborts the transaction) for an unregistered type, a payload failing its schema, or an
 * aggregate type/id that is not a subject-safe token.
 */
export async function appendToOutbox(
  tx: Tx,
  events: IntegrationEvent[],
  ctx: { registry: EventRegistry; now: Date; headers?: OutboxHeaders },
): Promise<void> {
  if (events.length === 0) return;
  const nowMs = ctx.now.getTime();
  const headers = JSON.stringify(ctx.headers ?? {});
  const args: Array<string | number> = [];
  for (const raw of events) {
    const event = ctx.registry.parse(raw);
    args.push(event.eventId, event.aggregateType, event.aggregateId, event.type, JSON.stringify(event), headers, Date.parse(event.occurredAt), nowMs);
  }
  await sqlOf(tx).execute({
    sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, headers, status, attempts, occurred_at, available_at) VALUES ${events
      .map(() => "(?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?)")
      .join(', ')}`,
    args,
  });
}
