import { sql } from 'drizzle-orm';
import type { Database, Tx } from '../db/open-database.ts';
import { integerOrNull, textOf, textOrBytes, timeMsOrNull } from '../db/column-guards.ts';

/** A parked outbox row: what the relay gave up on and why, with the stored event. */
export type FailedRow = {
  id: string;
  seq: number;
  aggregateType: string;
  aggregateId: string;
  messageType: string;
  /** null when the column holds no count (a row a script stored; the relay parks such a row at once). */
  attempts: number | null;
  lastError: string | null;
  /** ISO 8601; null when the column holds no time a Date can show. */
  occurredAt: string | null;
  /** The stored integration event (JSON text; stored bytes are decoded as UTF-8, invalid ones shown as U+FFFD). */
  payload: string;
};

/** One page of failed rows, oldest first, and the seq to ask for the next page after (undefined on the last one). */
export type FailedPage = { items: FailedRow[]; next: number | undefined };

/**
 * Failed rows after a seq, oldest first: a keyset range of idx_outbox_status_seq (never OFFSET). A parked row may be
 * one a script stored with odd columns, which is why the relay parked it: those are read through guards, so such a
 * row is listed (for an operator to check) instead of failing the whole page, and text that holds bytes that are no
 * UTF-8 is listed with U+FFFD in their place instead of aborting the process in the driver.
 */
export const FAILED_PAGE_SQL = `
  SELECT ${textOrBytes('id')} AS id, seq, ${textOrBytes('aggregate_type')} AS aggregate_type, ${textOrBytes('aggregate_id')} AS aggregate_id,
    ${textOrBytes('message_type')} AS message_type, ${integerOrNull('attempts')} AS attempts, ${textOrBytes('last_error')} AS last_error,
    ${timeMsOrNull('occurred_at')} AS occurred_at, ${textOrBytes('payload')} AS payload
  FROM outbox WHERE status = 'failed' AND seq > ? ORDER BY seq LIMIT ?`;

/** Reads `limit` parked (`failed`) outbox rows after seq `after` (from the first without it), oldest first. */
export async function pageFailed(db: Database, query: { limit: number; after?: number | undefined }): Promise<FailedPage> {
  // one more than asked: whether it comes back says whether there is a next page
  const rs = await db.$client.execute({ sql: FAILED_PAGE_SQL, args: [query.after ?? 0, query.limit + 1] });
  const items = rs.rows.slice(0, query.limit).map((r) => ({
    id: textOf(r.id),
    seq: Number(r.seq),
    aggregateType: textOf(r.aggregate_type),
    aggregateId: textOf(r.aggregate_id),
    messageType: textOf(r.message_type),
    attempts: r.attempts === null ? null : Number(r.attempts),
    lastError: r.last_error === null ? null : textOf(r.last_error),
    occurredAt: r.occurred_at === null ? null : new Date(Number(r.occurred_at)).toISOString(),
    payload: textOf(r.payload),
  }));
  return { items, next: rs.rows.length > query.limit ? items.at(-1)?.seq : undefined };
}

/** Lists the first `limit` parked (`failed`) outbox rows, oldest first. */
export async function listFailed(db: Database, limit = 100): Promise<FailedRow[]> {
  return (await pageFailed(db, { limit })).items;
}

/**
 * Puts failed rows back to `pending`, due at once (one row by id, or all when `id` is undefined). Their attempts
 * keep counting: a re-queued row is tried again by the relay's next pass, before any later row of its aggregate,
 * and parked again at once if it fails again. Must be called inside a write transaction. Returns how many rows
 * were re-queued. (`nowMs` is unused: a re-queued row is due whatever the relay's clock says.)
 */
export async function requeueFailed(tx: Tx, id: string | undefined, _nowMs?: number): Promise<number> {
  const res = await tx.run(
    id === undefined
      ? sql`UPDATE outbox SET status = 'pending', available_at = 0 WHERE status = 'failed'`
      : sql`UPDATE outbox SET status = 'pending', available_at = 0 WHERE status = 'failed' AND id = ${id}`,
  );
  return res.rowsAffected;
}
