import { index, integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';

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
