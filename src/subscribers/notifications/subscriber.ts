import { count, eq } from 'drizzle-orm';
import type { Database } from '../../db/open-database.ts';
import { defineSubscriber } from '../../inbox/subscriber.ts';
import type { AppEvents } from '../../modules.ts';
import { notificationEmails } from './tables.ts';

/** How many emails were queued for an order. */
export async function countOrderEmails(db: Database, orderId: string): Promise<number> {
  const [row] = await db.select({ n: count() }).from(notificationEmails).where(eq(notificationEmails.orderId, orderId));
  return row?.n ?? 0;
}

/**
 * Queues one confirmation email per placed order. The email table has no unique key of its own, so only the inbox
 * keeps a redelivered event from queueing a second email. Cancellations are acknowledged untouched.
 */
export const notifications = defineSubscriber<AppEvents>()({
  name: 'notifications',
  on: {
    'order.placed.v1': async (tx, e) => {
      await tx
        .insert(notificationEmails)
        .values({ orderId: e.data.orderId, customerId: e.data.customerId, kind: 'order-confirmation', createdAt: Date.parse(e.occurredAt) })
        .run();
    },
  },
});
