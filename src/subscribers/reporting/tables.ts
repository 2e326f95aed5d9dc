import { integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';

/** Per-customer order counters: the read model of the `reporting` subscriber, served at /reports. */
export const customerReports = sqliteTable('customer_reports', {
  customerId: text('customer_id').primaryKey(),
  ordersPlaced: integer('orders_placed').notNull().default(0),
  ordersCancelled: integer('orders_cancelled').notNull().default(0),
  totalCents: integer('total_cents').notNull().default(0),
});
