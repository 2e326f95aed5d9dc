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
 * `pending`, due (a fresh row always, whatever the clock of the process that wrote it; a retried row once its
 * back-off delay has passed), not among `exclude` (rows of the previous pass, already acknowledged, whose
 * mark-sent write is still running), and no earlier row of its aggregate is parked (`failed`) or waiting out a
 * retry delay. There is no cursor: every pass reads from the oldest pending row, so a due retry or a re-queued
 * row is read by the next pass whatever the backlog, and it always comes before the later rows of its aggregate
 * (the result is a prefix of the publishable rows in seq order, so an earlier publishable row of an aggregate is
 * in the same result as any later one). The scan walks idx_outbox_status_seq; the hold check probes the tiny
 * partial index idx_outbox_retrying.
 */
export const FETCH_PENDING_SQL = `SELECT o.seq, o.id, o.aggregate_type, o.aggregate_id, o.message_type, o.payload, o.headers, o.attempts, o.occurred_at
FROM outbox o
WHERE o.status = 'pending' AND (o.attempts = 0 OR o.available_at <= ?1)
  AND o.seq NOT IN (SELECT value FROM json_each(?3))
  AND NOT EXISTS (
    SELECT 1 FROM outbox h
    WHERE h.attempts > 0 AND h.status != 'sent'
      AND h.aggregate_type = o.aggregate_type AND h.aggregate_id = o.aggregate_id AND h.seq < o.seq
      AND (h.status = 'failed' OR h.available_at > ?1))
ORDER BY o.seq
LIMIT ?2`;

/** Reads up to `limit` rows that may be published now, leaving out `exclude` (acknowledged rows still being marked). */
export async function fetchPending(db: Database, nowMs: number, limit: number, exclude: readonly number[] = []): Promise<PendingRow[]> {
  const res = await db.$client.execute({ sql: FETCH_PENDING_SQL, args: [nowMs, limit, JSON.stringify(exclude)] });
  return res.rows as unknown as PendingRow[];
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
