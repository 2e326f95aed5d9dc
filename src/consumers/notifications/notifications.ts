import { count, eq } from 'drizzle-orm';
import type { Database, Tx } from '../../db/open-database.ts';
import type { IntegrationEvent } from '../../events/integration-event.ts';
import type { Subscriber } from '../../inbox/subscriber.ts';
import type { OrderPlacedV1 } from '../../orders/order-events.ts';
import { notificationEmails } from './schema.ts';

/**
 * The `notifications` effect: queues one confirmation email per placed order. The email table has no unique key
 * of its own, so only the inbox keeps a redelivered event from queueing a second email.
 */
export async function queueOrderEmail(tx: Tx, event: IntegrationEvent): Promise<void> {
  if (event.type !== 'order.placed.v1') return;
  const d = event.data as OrderPlacedV1;
  await tx
    .insert(notificationEmails)
    .values({ orderId: d.orderId, customerId: d.customerId, kind: 'order-confirmation', createdAt: Date.parse(event.occurredAt) })
    .run();
}

/** How many emails were queued for an order. */
export async function countOrderEmails(db: Database, orderId: string): Promise<number> {
  const [row] = await db.select({ n: count() }).from(notificationEmails).where(eq(notificationEmails.orderId, orderId));
  return row?.n ?? 0;
}

export const notifications: Subscriber = { name: 'notifications', aggregateTypes: ['order'], handle: queueOrderEmail };
