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
  (t) => [
    index('idx_orders_customer').on(t.customerId),
    check('orders_status_check', sql`${t.status} IN ('placed','cancelled')`),
  ],
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

/** Integration events waiting to be (or already) published; written only inside the command's transaction. */
export const outbox = sqliteTable(
  'outbox',
  {
    seq: integer('seq').primaryKey({ autoIncrement: true }),
    id: text('id').notNull().unique(),
    aggregateType: text('aggregate_type').notNull(),
    aggregateId: text('aggregate_id').notNull(),
    messageType: text('message_type').notNull(),
    payload: text('payload').notNull(),
    headers: text('headers').notNull().default('{}'),
    status: text('status', { enum: ['pending', 'sent', 'failed'] }).notNull(),
    attempts: integer('attempts').notNull().default(0),
    lastError: text('last_error'),
    occurredAt: integer('occurred_at').notNull(),
    availableAt: integer('available_at').notNull(),
    sentAt: integer('sent_at'),
  },
  (t) => [
    index('idx_outbox_status_seq').on(t.status, t.seq),
    // Rows that failed at least once and are not sent: tiny, and read each pass to hold back later rows of
    // their aggregate, so per-aggregate order survives retries and parked rows.
    index('idx_outbox_retrying')
      .on(t.aggregateType, t.aggregateId, t.seq)
      .where(sql`${t.attempts} > 0 AND ${t.status} != 'sent'`),
    check('outbox_status_check', sql`${t.status} IN ('pending','sent','failed')`),
  ],
);

/** Responses of successful POSTs by Idempotency-Key, written in the same transaction as the command. */
export const idempotencyKeys = sqliteTable(
  'idempotency_keys',
  {
    key: text('key').primaryKey(),
    fingerprint: text('fingerprint').notNull(),
    statusCode: integer('status_code').notNull(),
    responseBody: text('response_body').notNull(),
    location: text('location'),
    createdAt: integer('created_at').notNull(),
  },
  // Compaction deletes the oldest keys first, a batch at a time, without reading the rest of the table.
  (t) => [index('idx_idempotency_keys_created_at').on(t.createdAt)],
);

export const schema = { orders, orderLines, outbox, idempotencyKeys };
