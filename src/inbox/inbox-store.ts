import { and, eq, sql } from 'drizzle-orm';
import { sqlOf, type Tx } from '../db/open-database.ts';
import type { InboxMessage } from './inbox-message.ts';
import { deadLetters, inbox } from './tables.ts';

/**
 * Claims `eventId` for `consumer` in the caller's transaction. False means the row already exists: the event
 * was applied before (the caller must not apply it again). Must be part of the transaction that applies the effect.
 */
export async function insertInboxRow(tx: Tx, row: { eventId: string; consumer: string; messageType: string; receivedAt: number }): Promise<boolean> {
  const res = await tx.insert(inbox).values(row).onConflictDoNothing().run();
  return res.rowsAffected === 1;
}

// `WHERE true` lets SQLite parse the upsert clause after a SELECT. One fixed text: prepared once where the client
// keeps prepared statements.
const CLAIM_SQL = `INSERT INTO inbox (event_id, consumer, message_type, received_at)
  SELECT value ->> 0, ?, value ->> 1, ? FROM json_each(?) WHERE true
  ON CONFLICT DO NOTHING RETURNING event_id`;

/**
 * Claims many events for `consumer` in one statement in the caller's transaction and returns the ids that were
 * new (a second copy of an id within `rows` is not new). The rows travel as one JSON parameter expanded by
 * json_each: binding four parameters a row, or drizzle's multi-row builder, costs more than the inserts; the
 * statement goes to the transaction as plain SQL, since drizzle's query building costs as much again.
 * Must be part of the transaction that applies them.
 */
export async function claimInboxRows(
  tx: Tx,
  consumer: string,
  rows: Array<{ eventId: string; messageType: string }>,
  receivedAt: number,
): Promise<Set<string>> {
  const fresh = new Set<string>();
  if (rows.length === 0) return fresh;
  const pairs: string[][] = new Array(rows.length);
  for (let i = 0; i < rows.length; i++) pairs[i] = [rows[i]!.eventId, rows[i]!.messageType];
  const rs = await sqlOf(tx).execute({ sql: CLAIM_SQL, args: [consumer, receivedAt, JSON.stringify(pairs)] });
  for (const row of rs.rows) fresh.add(String(row[0]));
  return fresh;
}

/** Stores (or refreshes) the dead letter of a message with the error that stopped it, in the caller's transaction. */
export async function storeDeadLetter(tx: Tx, row: { eventId: string; consumer: string; msg: InboxMessage; error: string; deadAt: number }): Promise<void> {
  const values = {
    eventId: row.eventId,
    consumer: row.consumer,
    subject: row.msg.subject,
    headers: JSON.stringify(row.msg.headers),
    payload: row.msg.payload,
    error: row.error,
    deliveries: row.msg.deliveryCount,
    deadAt: row.deadAt,
  };
  await tx
    .insert(deadLetters)
    .values(values)
    .onConflictDoUpdate({
      target: [deadLetters.eventId, deadLetters.consumer],
      set: {
        subject: sql`excluded.subject`,
        headers: sql`excluded.headers`,
        payload: sql`excluded.payload`,
        error: sql`excluded.error`,
        deliveries: sql`excluded.deliveries`,
        deadAt: sql`excluded.dead_at`,
      },
    })
    .run();
}

/** Records a failed replay on the dead letter (the stored copy stays), in the caller's transaction. */
export async function recordReplayError(tx: Tx, key: { eventId: string; consumer: string }, error: string): Promise<void> {
  await tx
    .update(deadLetters)
    .set({ error })
    .where(and(eq(deadLetters.eventId, key.eventId), eq(deadLetters.consumer, key.consumer)))
    .run();
}

/** Removes a dead letter; part of the transaction that finally applied it. */
export async function deleteDeadLetter(tx: Tx, key: { eventId: string; consumer: string }): Promise<boolean> {
  const res = await tx
    .delete(deadLetters)
    .where(and(eq(deadLetters.eventId, key.eventId), eq(deadLetters.consumer, key.consumer)))
    .run();
  return res.rowsAffected > 0;
}
