import { sql } from 'drizzle-orm';
import type { Database, Tx } from '../db/open-database.ts';

export type FailedRow = {
  id: string;
  seq: number;
  aggregateType: string;
  aggregateId: string;
  messageType: string;
  attempts: number;
  lastError: string | null;
  occurredAt: string;
};

/** Lists parked (`failed`) outbox rows, oldest first. */
export async function listFailed(db: Database, limit = 100): Promise<FailedRow[]> {
  const rows = await db.all<{
    id: string;
    seq: number;
    aggregate_type: string;
    aggregate_id: string;
    message_type: string;
    attempts: number;
    last_error: string | null;
    occurred_at: number;
  }>(sql`SELECT id, seq, aggregate_type, aggregate_id, message_type, attempts, last_error, occurred_at FROM outbox WHERE status = 'failed' ORDER BY seq LIMIT ${limit}`);
  return rows.map((r) => ({
    id: r.id,
    seq: Number(r.seq),
    aggregateType: r.aggregate_type,
    aggregateId: r.aggregate_id,
    messageType: r.message_type,
    attempts: Number(r.attempts),
    lastError: r.last_error,
    occurredAt: new Date(Number(r.occurred_at)).toISOString(),
  }));
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
