import { eq, sql } from 'drizzle-orm';
import { Hono } from 'hono';
import type { Database, Tx } from '../../db/open-database.ts';
import { describeQuery } from '../../http/describe-route.ts';
import { defineSubscriber } from '../../inbox/subscriber.ts';
import type { AppEvents } from '../../modules.ts';
import { customerReports } from './tables.ts';

export type CustomerReport = { customerId: string; ordersPlaced: number; ordersCancelled: number; totalCents: number };

/**
 * Adds to a customer's counters (creating the row at zero first). One hand-written upsert: it runs once per
 * event on the consumer's hot path, where drizzle's builder costs more than the statement. Increments, so NOT
 * idempotent on its own: the inbox is what keeps the counts exact.
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

/** Reads a customer's report; an unknown customer has all zeros. */
export async function readCustomerReport(db: Database, customerId: string): Promise<CustomerReport> {
  const [row] = await db.select().from(customerReports).where(eq(customerReports.customerId, customerId));
  return row ?? { customerId, ordersPlaced: 0, ordersCancelled: 0, totalCents: 0 };
}

/** Per-customer order counters (placed, cancelled, total of the orders not cancelled), served at /reports. */
export const reporting = defineSubscriber<AppEvents>()({
  name: 'reporting',
  on: {
    'order.placed.v1': (tx, e) => addToReport(tx, e.data.customerId, { placed: 1, cancelled: 0, cents: e.data.totalCents }),
    'order.cancelled.v1': (tx, e) => addToReport(tx, e.data.customerId, { placed: 0, cancelled: 1, cents: -e.data.totalCents }),
  },
  basePath: '/reports',
  routes: (db) =>
    new Hono().get('/customers/:customerId', describeQuery('A customer’s order counters (zeros when unknown)'), async (c) =>
      c.json(await readCustomerReport(db, c.req.param('customerId'))),
    ),
});
