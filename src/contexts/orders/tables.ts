import { sql } from 'drizzle-orm';
import { check, index, integer, primaryKey, sqliteTable, text } from 'drizzle-orm/sqlite-core';

/** Current state of each order (the example aggregate). */
export const orders = sqliteTable(
  'orders',
  {
    id: text('id').primaryKey(),
    customerId: text('customer_id').notNull(),
    currency: text('currency').notNull(),
    status: text('status', { enum: ['placed', 'cancelled'] }).notNull(),
    totalCents: integer('total_cents').notNull(),
    version: integer('version').notNull(),
    placedAt: integer('placed_at').notNull(),
    cancelledAt: integer('cancelled_at'),
    cancelReason: text('cancel_reason'),
  },
  (t) => [index('idx_orders_customer').on(t.customerId), check('orders_status_check', sql`${t.status} IN ('placed','cancelled')`)],
);

/** The lines of an order, in the order they were given. */
export const orderLines = sqliteTable(
  'order_lines',
  {
    orderId: text('order_id')
      .notNull()
      .references(() => orders.id),
    lineNo: integer('line_no').notNull(),
    sku: text('sku').notNull(),
    quantity: integer('quantity').notNull(),
    unitPriceCents: integer('unit_price_cents').notNull(),
  },
  (t) => [primaryKey({ columns: [t.orderId, t.lineNo] })],
);
