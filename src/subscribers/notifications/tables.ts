import { integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';

/**
 * Emails the `notifications` subscriber queued, one per placed order. Deliberately without a unique key of its
 * own: only the inbox keeps a redelivered event from queueing a second email.
 */
export const notificationEmails = sqliteTable('notification_emails', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  orderId: text('order_id').notNull(),
  customerId: text('customer_id').notNull(),
  kind: text('kind').notNull(),
  createdAt: integer('created_at').notNull(),
});
