import { sql } from 'drizzle-orm';
import { check, index, integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';

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
    /** When a retried row is due, in ms; a value that is no number is stored as 0, due now (trigger outbox_due_time_checked). */
    availableAt: integer('available_at').notNull(),
    sentAt: integer('sent_at'),
    /**
     * Stable 32-bit hash of (aggregate_type, aggregate_id) (see partition.ts); NULL until the relay gives it one: on rows
     * older than partitions, and on unsent rows the triggers outbox_row_placed and outbox_row_moved found unmarked,
     * restored at or below the highest seq, or in another partition than their hash's (migration 0007).
     */
    aggregateHash: integer('aggregate_hash'),
    /** aggregate_hash mod the partition count (outbox_partitions) when the row was stored: the relay lease that covers it. */
    partition: integer('partition').notNull().default(0),
    /**
     * 1 when appendToOutbox validated the event and wrote the payload itself: the relay then checks only the payload's
     * envelope prefix against the columns (row-message.ts). 0 for any other row (a script, a restore, rows older than
     * the column), which is parsed and validated in full and whose text columns are checked for bytes that are no UTF-8;
     * the trigger outbox_payload_edited clears it when the payload, the headers or a column the check compares is
     * changed, outbox_row_restored_unmarked when a row is stored under a seq already given.
     */
    payloadValidated: integer('payload_validated').notNull().default(0),
  },
  (t) => [
    // The relay's scan in commit order; partition is in the index so rows of partitions another relay leases are
    // skipped without reading the row.
    index('idx_outbox_status_seq').on(t.status, t.seq, t.partition),
    // Rows that failed at least once and are not sent: tiny, and read each pass to hold back later rows of
    // their aggregate, so per-aggregate order survives retries and parked rows.
    index('idx_outbox_retrying').on(t.aggregateType, t.aggregateId, t.seq).where(sql`${t.attempts} > 0 AND ${t.status} != 'sent'`),
    // Retried and re-queued rows not yet sent, by when they are due: the relay asks "is any retry due?" in
    // O(log n) on every pass, to know when rows it skipped as held may have become publishable.
    index('idx_outbox_retry_due').on(t.availableAt).where(sql`${t.attempts} > 0 AND ${t.status} = 'pending'`),
    // Unsent rows without a partition yet (stored by a release before partitions, or placed by a script): normally empty. A pass gives them
    // theirs before reading, and no later row of their aggregate is published while one is waiting.
    index('idx_outbox_unhashed').on(t.aggregateType, t.aggregateId, t.seq).where(sql`${t.aggregateHash} IS NULL AND ${t.status} != 'sent'`),
    check('outbox_status_check', sql`${t.status} IN ('pending','sent','failed')`),
  ],
);

/**
 * One row counting retried or re-queued outbox rows that became `sent` (kept by the trigger outbox_retry_sent, so it
 * counts what any process marks), and rows given their partition by a relay (hashUnpartitionedRows). A relay's floor
 * (see relay-store.ts) is valid only while this count is unchanged: such a row may have held later rows of its
 * aggregate, or sit below the floor itself.
 */
export const outboxRelayEpoch = sqliteTable('outbox_relay_epoch', {
  id: integer('id').primaryKey(),
  retriesSent: integer('retries_sent').notNull().default(0),
});

/**
 * Rows the relay published while draining a backlog, recorded here instead of rewriting each outbox row (which copies
 * its whole payload): a pending outbox row with an entry of the same seq and id counts as sent. The relay folds these
 * entries into the outbox (status `sent`, `sent_at`) once it has caught up (see foldSentMarks), and an explicit status
 * change to anything but `sent` drops a row's entry (trigger outbox_sent_mark_dropped).
 */
export const outboxSent = sqliteTable('outbox_sent', {
  seq: integer('seq').primaryKey(),
  id: text('id').notNull(),
  sentAt: integer('sent_at').notNull(),
});

/** One row: how many partitions outbox rows are spread over. Rows take `aggregate_hash % count` at insert; see partition.ts. */
export const outboxPartitions = sqliteTable(
  'outbox_partitions',
  {
    id: integer('id').primaryKey(),
    count: integer('count').notNull(),
  },
  (t) => [check('outbox_partitions_count_check', sql`${t.count} BETWEEN 1 AND 1024`)],
);
