import { and, eq, sql } from 'drizzle-orm';
import type { Client } from '@libsql/client';
import { sqlOf, type SqlRunner, type Tx } from '../db/open-database.ts';
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

// `WHERE true` lets SQLite parse the upsert clause after a SELECT. Fixed texts: prepared once where the client keeps
// prepared statements.
/** Claims `[event_id, message_type]` pairs (one JSON array) and hands back the ids that went in. */
const CLAIM_RETURNING_SQL = `INSERT INTO inbox (event_id, consumer, message_type, received_at)
  SELECT value ->> 0, ?, value ->> 1, ? FROM json_each(?) WHERE true
  ON CONFLICT DO NOTHING RETURNING event_id`;
/** Claims the ids (one JSON array) of events of one type, handing nothing back. */
const CLAIM_OF_TYPE_SQL = `INSERT INTO inbox (event_id, consumer, message_type, received_at)
  SELECT value, ?, ?, ? FROM json_each(?) WHERE true
  ON CONFLICT DO NOTHING`;

/**
 * Claims many events for `consumer` in the caller's transaction and returns the ids that were new (a second copy
 * of an id within `rows` is not new). Must be part of the transaction that applies them.
 *
 * The ids travel as JSON expanded by json_each: binding four parameters a row, or drizzle's multi-row builder, costs
 * more than the inserts; the statements go to the transaction as plain SQL, since drizzle's query building costs as
 * much again. On a local file, RETURNING would hand every new id back through the driver, which costs about as much
 * as the inserts, while a batch usually holds only new events and the count of inserted rows then says so. So there
 * the claim is one insert per event type without RETURNING, inside a savepoint: all rows in, all new; none in, all
 * applied before; only a mixed batch is rolled back to the savepoint and claimed again with RETURNING to learn
 * which went in. On a libSQL server every statement is a round trip, so there the claim is that one statement.
 */
export async function claimInboxRows(
  tx: Tx,
  consumer: string,
  rows: Array<{ eventId: string; messageType: string }>,
  receivedAt: number,
): Promise<Set<string>> {
  if (rows.length === 0) return new Set();
  const run = sqlOf(tx);
  if (!onLocalFile(tx)) return claimReturning(run, consumer, rows, receivedAt);
  let fresh = new Set<string>();
  const byType = new Map<string, string[]>();
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i]!;
    fresh.add(row.eventId);
    const ids = byType.get(row.messageType);
    if (ids) ids.push(row.eventId);
    else byType.set(row.messageType, [row.eventId]);
  }
  // a statement that fails leaves the savepoint open: the rollback of the caller's transaction (or of the savepoint
  // enclosing this write) ends it with the rest
  await run.execute('SAVEPOINT inbox_claim');
  let inserted = 0;
  for (const [type, ids] of byType) {
    inserted += (await run.execute({ sql: CLAIM_OF_TYPE_SQL, args: [consumer, type, receivedAt, JSON.stringify(ids)] })).rowsAffected;
  }
  if (inserted === 0) fresh.clear();
  else if (inserted < fresh.size) {
    await run.execute('ROLLBACK TO inbox_claim');
    fresh = await claimReturning(run, consumer, rows, receivedAt);
  }
  await run.execute('RELEASE inbox_claim');
  return fresh;
}

/** The claim as one statement that hands back the ids that went in. */
async function claimReturning(
  run: SqlRunner,
  consumer: string,
  rows: Array<{ eventId: string; messageType: string }>,
  receivedAt: number,
): Promise<Set<string>> {
  const pairs: string[][] = new Array(rows.length);
  for (let i = 0; i < rows.length; i++) pairs[i] = [rows[i]!.eventId, rows[i]!.messageType];
  const rs = await run.execute({ sql: CLAIM_RETURNING_SQL, args: [consumer, receivedAt, JSON.stringify(pairs)] });
  const fresh = new Set<string>();
  for (const row of rs.rows) fresh.add(String(row[0]));
  return fresh;
}

/**
 * Whether `tx` writes to a local file (where a statement costs microseconds) rather than to a libSQL server; false
 * when drizzle's transaction does not show its client, which keeps the one-statement claim (right everywhere).
 */
const onLocalFile = (tx: Tx): boolean => (tx as unknown as { session?: { client?: Partial<Pick<Client, 'protocol'>> } }).session?.client?.protocol === 'file';

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

const APPLIED_SQL = `SELECT event_id FROM inbox WHERE consumer = ?1 AND event_id IN (SELECT value FROM json_each(?2))
  UNION SELECT event_id FROM dead_letters WHERE consumer = ?1 AND event_id IN (SELECT value FROM json_each(?2))`;

/** Of `eventIds`, those `consumer` applied (its inbox) or gave up on (its dead letters); a read outside any write. */
export async function appliedEventIds(client: Pick<Client, 'execute'>, consumer: string, eventIds: string[]): Promise<Set<string>> {
  const out = new Set<string>();
  for (let i = 0; i < eventIds.length; i += 5000) {
    const rs = await client.execute({ sql: APPLIED_SQL, args: [consumer, JSON.stringify(eventIds.slice(i, i + 5000))] });
    for (const row of rs.rows) out.add(String(row[0]));
  }
  return out;
}
