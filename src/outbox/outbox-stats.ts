import { sql } from 'drizzle-orm';
import type { Database } from '../db/open-database.ts';

export type OutboxStats = { pending: number; failed: number; sent: number; oldestPendingAgeMs: number };

/** Counts outbox rows by status and the age of the oldest pending row (0 when none is pending). */
export async function readOutboxStats(db: Database, now: Date): Promise<OutboxStats> {
  const counts = await db.all<{ status: string; n: number }>(
    sql`SELECT status, count(*) AS n FROM outbox GROUP BY status`,
  );
  const oldest = await db.all<{ occurred_at: number }>(
    sql`SELECT occurred_at FROM outbox WHERE status = 'pending' ORDER BY seq LIMIT 1`,
  );
  const by = (s: string) => Number(counts.find((r) => r.status === s)?.n ?? 0);
  const first = oldest[0];
  return {
    pending: by('pending'),
    failed: by('failed'),
    sent: by('sent'),
    oldestPendingAgeMs: first ? Math.max(0, now.getTime() - Number(first.occurred_at)) : 0,
  };
}
