import type { Tx } from '../db/open-database.ts';
import type { Deps } from '../deps.ts';
import { appendToOutbox, type OutboxHeaders } from '../outbox/append-to-outbox.ts';
import { place, type Order, type PlaceOrder } from './order.ts';
import { toOrderIntegrationEvents } from './order-events.ts';
import { insertOrder } from './order-store.ts';

export type CommandDeps = Pick<Deps, 'registry' | 'clock' | 'newId'>;

/** Places an order: state and its events in the caller's write transaction. Must be called inside `writer.write`. */
export async function placeOrder(tx: Tx, deps: CommandDeps, cmd: PlaceOrder, headers?: OutboxHeaders): Promise<Order> {
  const now = deps.clock();
  const { order, events } = place(cmd, { id: deps.newId(), now });
  await insertOrder(tx, order);
  await appendToOutbox(tx, toOrderIntegrationEvents(events, deps.newId), { registry: deps.registry, now, headers });
  return order;
}
