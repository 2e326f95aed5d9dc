import { sqlOf, type Database, type Tx } from '../db/open-database.ts';

export type PendingRow = {
  seq: number;
  id: string;
  aggregate_type: string;
  aggregate_id: string;
  message_type: string;
  payload: string;
  headers: string;
  attempts: number;
  occurred_at: number;
};

/**
 * The relay's fetch: up to `limit` publishable rows in commit (seq) order. A row is publishable when it is
 * `pending`, due (a fresh row always, whatever the clock of the process that wrote it; a retried or re-queued row
 * once its `available_at` has passed), not among `exclude` (rows of the previous pass, already acknowledged, whose
 * mark-sent write is still running), and no earlier row of its aggregate is parked (`failed`) or waiting out a
 * retry delay. The result is a prefix of the publishable rows in seq order, so an earlier publishable row of an
 * aggregate is in the same result as any later one.
 *
 * `?4` is the caller's floor: every pending row at or below it was held (or being marked) when last read, so the
 * scan starts above it instead of walking a large held backlog on every pass. A held row becomes publishable only
 * when the row holding it is re-queued, comes due or is sent, so the floor is ignored — the scan starts at the
 * oldest pending row — whenever a retried or re-queued row is due (idx_outbox_retry_due answers that in O(log n))
 * or `outbox_relay_epoch` counts a retried row sent since the floor was taken (`?5`; the trigger counts what any
 * process marks, so a second relay cannot leave rows stranded below this one's floor). Such a row is then read by
 * this very pass, before any later row of its aggregate.
 * The scan walks idx_outbox_status_seq; the hold check probes the partial index idx_outbox_retrying.
 */
export const FETCH_PENDING_SQL = `SELECT o.seq, o.id, o.aggregate_type, o.aggregate_id, o.message_type, o.payload, o.headers, o.attempts, o.occurred_at
FROM outbox o
WHERE o.status = 'pending' AND (o.attempts = 0 OR o.available_at <= ?1)
  AND o.seq > (CASE WHEN EXISTS (
      SELECT 1 FROM outbox r INDEXED BY idx_outbox_retry_due WHERE r.attempts > 0 AND r.status = 'pending' AND r.available_at <= ?1
    ) OR (SELECT e.retries_sent FROM outbox_relay_epoch e WHERE e.id = 1) IS NOT ?5 THEN 0 ELSE ?4 END)
  AND o.seq NOT IN (SELECT value FROM json_each(?3))
  AND NOT EXISTS (
    SELECT 1 FROM outbox h
    WHERE h.attempts > 0 AND h.status != 'sent'
      AND h.aggregate_type = o.aggregate_type AND h.aggregate_id = o.aggregate_id AND h.seq < o.seq
      AND (h.status = 'failed' OR h.available_at > ?1))
ORDER BY o.seq
LIMIT ?2`;

/**
 * The highest seq of the outbox (rows committed later are above it) and the count of retried rows sent, read in the
 * same snapshot as the fetch.
 */
const HIGH_SEQ_SQL = 'SELECT coalesce((SELECT max(seq) FROM outbox), 0) AS high, (SELECT retries_sent FROM outbox_relay_epoch WHERE id = 1) AS epoch';

/** Where a floor stands: the seq below which rows were held, and the count of retried rows sent when it was taken. */
export type Floor = { seq: number; epoch: number | null };

/** What the relay read in one snapshot: the publishable rows, the highest seq and the retried-rows-sent count then. */
export type Fetched = { rows: PendingRow[]; high: number; epoch: number | null };

/**
 * Reads up to `limit` rows that may be published now, above `floor` unless a retry is due, leaving out `exclude`
 * (acknowledged rows still being marked), together with the outbox's highest seq in the same read transaction.
 */
export async function fetchPending(
  db: Database,
  nowMs: number,
  limit: number,
  exclude: readonly number[] = [],
  floor: Floor = { seq: 0, epoch: null },
): Promise<Fetched> {
  const [fetched, state] = await db.$client.batch(
    [
      { sql: FETCH_PENDING_SQL, args: [nowMs, limit, JSON.stringify(exclude), floor.seq, floor.epoch] },
      { sql: HIGH_SEQ_SQL, args: [] },
    ],
    'read',
  );
  const row = state!.rows[0]!;
  return { rows: fetched!.rows as unknown as PendingRow[], high: Number(row.high), epoch: row.epoch === null ? null : Number(row.epoch) };
}

export const aggregateKey = (type: string, id: string) => `${type}\u0000${id}`;

/** Marks acknowledged rows sent in one statement. Must be called inside a write transaction. */
export async function markSent(tx: Tx, seqs: number[], nowMs: number): Promise<number> {
  if (seqs.length === 0) return 0;
  const res = await sqlOf(tx).execute({
    sql: "UPDATE outbox SET status = 'sent', sent_at = ? WHERE status = 'pending' AND seq IN (SELECT value FROM json_each(?))",
    args: [nowMs, JSON.stringify(seqs)],
  });
  return res.rowsAffected;
}

/**
 * Records a permanent publish failure: attempts + 1, last_error, the next try after `retryAtMs`, and status
 * `failed` once attempts reach `maxAttempts`. Must be called inside a write transaction. Returns the new status.
 */
export async function recordFailure(
  tx: Tx,
  row: { seq: number; attempts: number },
  error: string,
  retryAtMs: number,
  maxAttempts: number,
): Promise<'pending' | 'failed'> {
  const status = row.attempts + 1 >= maxAttempts ? 'failed' : 'pending';
  await sqlOf(tx).execute({
    sql: "UPDATE outbox SET attempts = attempts + 1, last_error = ?, available_at = ?, status = ? WHERE seq = ? AND status = 'pending'",
    args: [error.slice(0, 2000), retryAtMs, status, row.seq],
  });
  return status;
}
