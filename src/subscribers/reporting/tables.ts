import { integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';

/** Per-customer order counters of the `reporting` subscriber (DESIGN.md §8 read model). */
export const customerReports = sqliteTable('customer_reports', {
  customerId: text('customer_id').primaryKey(),
  ordersPlaced: integer('orders_placed').notNull().default(0),
  ordersCancelled: integer('orders_cancelled').notNull().default(0),
  totalCents: integer('total_cents').notNull().default(0),
});
