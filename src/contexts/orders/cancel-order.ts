import type { Tx } from '../../db/open-database.ts';
import { ConflictError, NotFoundError } from '../../errors.ts';
import { ok, refuse, type Command, type CommandOutcome } from '../../http/command-route.ts';
import { toOrderIntegrationEvents } from './events.ts';
import { cancel } from './order.ts';
import { loadOrder, saveCancellation } from './store.ts';

/** Cancels the order `cmd.params.id`: its state and its `order.cancelled.v1` event in the caller's write transaction. */
export async function cancelOrder(tx: Tx, body: { reason?: string | undefined }, cmd: Command): Promise<CommandOutcome> {
  const orderId = cmd.params.id!;
  const current = await loadOrder(tx, orderId);
  if (!current) return refuse(new NotFoundError(`Order ${orderId} does not exist.`));
  const decision = cancel(current, { reason: body.reason ?? null }, { now: cmd.now });
  if (decision.outcome === 'already-cancelled') return refuse(new ConflictError(`Order ${orderId} is already cancelled.`));
  await saveCancellation(tx, decision.order);
  await cmd.emit(toOrderIntegrationEvents(decision.events, cmd.newId));
  return ok({ orderId, status: decision.order.status });
}
