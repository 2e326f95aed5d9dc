import { eq, sql } from 'drizzle-orm';
import type { Database, Tx } from '../../db/open-database.ts';
import type { IntegrationEvent } from '../../events/integration-event.ts';
import type { Subscriber } from '../../inbox/subscriber.ts';
import type { OrderCancelledV1, OrderPlacedV1 } from '../../orders/order-events.ts';
import { customerReports } from './schema.ts';

export type CustomerReport = { customerId: string; ordersPlaced: number; ordersCancelled: number; totalCents: number };

/**
 * Adds to a customer's counters (creating the row at zero first). One hand-written upsert: it runs once per
 * event on the consumer's hot path, where drizzle's builder costs more than the statement.
 */
async function addToReport(tx: Tx, customerId: string, d: { placed: number; cancelled: number; cents: number }): Promise<void> {
  await tx.run(sql`
    INSERT INTO customer_reports (customer_id, orders_placed, orders_cancelled, total_cents)
    VALUES (${customerId}, ${d.placed}, ${d.cancelled}, ${d.cents})
    ON CONFLICT (customer_id) DO UPDATE SET
      orders_placed = orders_placed + excluded.orders_placed,
      orders_cancelled = orders_cancelled + excluded.orders_cancelled,
      total_cents = total_cents + excluded.total_cents`);
}

/**
 * The `reporting` effect: per-customer counters (DESIGN.md §8 read model). Increments, so NOT idempotent on its
 * own — applying an event twice would count it twice; the inbox is what keeps the counts exact.
 */
export async function applyToCustomerReport(tx: Tx, event: IntegrationEvent): Promise<void> {
  switch (event.type) {
    case 'order.placed.v1': {
      const d = event.data as OrderPlacedV1;
      return addToReport(tx, d.customerId, { placed: 1, cancelled: 0, cents: d.totalCents });
    }
    case 'order.cancelled.v1': {
      const d = event.data as OrderCancelledV1;
      return addToReport(tx, d.customerId, { placed: 0, cancelled: 1, cents: -d.totalCents });
    }
    default:
      return; // other order events do not change the report
  }
}

/** Reads a customer's report; an unknown customer has all zeros. */
export async function readCustomerReport(db: Database, customerId: string): Promise<CustomerReport> {
  const [row] = await db.select().from(customerReports).where(eq(customerReports.customerId, customerId));
  return row ?? { customerId, ordersPlaced: 0, ordersCancelled: 0, totalCents: 0 };
}

export const reporting: Subscriber = { name: 'reporting', aggregateTypes: ['order'], handle: applyToCustomerReport };
