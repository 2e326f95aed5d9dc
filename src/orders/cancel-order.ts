import type { Tx } from '../db/open-database.ts';
import { appendToOutbox, type OutboxHeaders } from '../outbox/append-to-outbox.ts';
import { cancel, type Order } from './order.ts';
import { toOrderIntegrationEvents } from './order-events.ts';
import { loadOrder, saveCancellation } from './order-store.ts';
import type { CommandDeps } from './place-order.ts';

export type CancelOrderResult = { outcome: 'cancelled'; order: Order } | { outcome: 'not-found' } | { outcome: 'already-cancelled' };

/** Cancels an order: state and its event in the caller's write transaction. Must be called inside `writer.write`. */
export async function cancelOrder(
  tx: Tx,
  deps: CommandDeps,
  cmd: { orderId: string; reason: string | null },
  headers?: OutboxHeaders,
): Promise<CancelOrderResult> {
  const current = await loadOrder(tx, cmd.orderId);
  if (!current) return { outcome: 'not-found' };
  const now = deps.clock();
  const decision = cancel(current, { reason: cmd.reason }, { now });
  if (decision.outcome === 'already-cancelled') return decision;
  await saveCancellation(tx, decision.order);
  await appendToOutbox(tx, toOrderIntegrationEvents(decision.events, deps.newId), { registry: deps.registry, now, headers });
  return { outcome: 'cancelled', order: decision.order };
}
