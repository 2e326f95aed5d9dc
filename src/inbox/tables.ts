import { index, integer, primaryKey, sqliteTable, text } from 'drizzle-orm/sqlite-core';

/**
 * Events a subscriber has applied, one row per (event, consumer): the row is inserted in the same transaction
 * as the effect, so the primary key is what makes a redelivered or republished event a no-op.
 */
export const inbox = sqliteTable(
  'inbox',
  {
    eventId: text('event_id').notNull(),
    consumer: text('consumer').notNull(),
    messageType: text('message_type').notNull(),
    receivedAt: integer('received_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.eventId, t.consumer] }), index('idx_inbox_received_at').on(t.receivedAt)],
);

/** Messages a subscriber gave up on (unknown type, invalid payload, or max_deliver failures), kept for replay. */
export const deadLetters = sqliteTable(
  'dead_letters',
  {
    eventId: text('event_id').notNull(),
    consumer: text('consumer').notNull(),
    subject: text('subject').notNull(),
    /** JSON object of the message's NATS headers. */
    headers: text('headers').notNull().default('{}'),
    payload: text('payload').notNull(),
    error: text('error').notNull(),
    deliveries: integer('deliveries').notNull(),
    deadAt: integer('dead_at').notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.eventId, t.consumer] }),
    // A consumer's dead letters oldest first: the admin listing pages through them by (dead_at, event_id).
    index('idx_dead_letters_consumer_dead_at').on(t.consumer, t.deadAt, t.eventId),
  ],
);
