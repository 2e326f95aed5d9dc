import type { Tx } from '../../db/open-database.ts';
import { created, type Command, type CommandOutcome } from '../../http/command-route.ts';
import { toOrderIntegrationEvents } from './events.ts';
import { place, type PlaceOrder } from './order.ts';
import { insertOrder } from './store.ts';

/** Places an order: its state and its `order.placed.v1` event in the caller's write transaction. */
export async function placeOrder(tx: Tx, body: PlaceOrder, cmd: Command): Promise<CommandOutcome> {
  const { order, events } = place(body, { id: cmd.newId(), now: cmd.now });
  await insertOrder(tx, order);
  await cmd.emit(toOrderIntegrationEvents(events, cmd.newId));
  return created(`/orders/${order.id}`, {
    orderId: order.id,
    status: order.status,
    totalCents: order.totalCents,
    currency: order.currency,
    placedAt: order.placedAt.toISOString(),
  });
}
