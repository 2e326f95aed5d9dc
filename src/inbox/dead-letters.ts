import { asc, eq } from 'drizzle-orm';
import type { Database } from '../db/open-database.ts';
import { applyOnce, describeError, type InboxDeps } from './handle-once.ts';
import { decodeMessage, type InboxMessage } from './inbox-message.ts';
import { deleteDeadLetter, recordReplayError } from './inbox-store.ts';
import { deadLetters } from './tables.ts';

/** A message a subscriber gave up on, with the stored copy replay works from. */
export type DeadLetter = {
  eventId: string;
  consumer: string;
  subject: string;
  headers: Record<string, string>;
  payload: string;
  error: string;
  deliveries: number;
  deadAt: number;
};

/** The dead letters of `consumer`, oldest first. */
export async function listDeadLetters(db: Database, consumer: string): Promise<DeadLetter[]> {
  const rows = await db.select().from(deadLetters).where(eq(deadLetters.consumer, consumer)).orderBy(asc(deadLetters.deadAt), asc(deadLetters.eventId));
  return rows.map((r) => ({ ...r, headers: JSON.parse(r.headers) as Record<string, string> }));
}

export type ReplayDeps = InboxDeps & { db: Database };

export type ReplayReport = {
  /** Applied now; their dead letters are gone. */
  replayed: string[];
  /** Already in the inbox (applied by an earlier delivery); their dead letters are gone. */
  duplicates: string[];
  /** Still failing; the dead letter stays with the new error. */
  failed: Array<{ eventId: string; error: string }>;
  /** Asked for by id but not a dead letter of this consumer. */
  notFound: string[];
};

/**
 * Re-applies dead letters of `deps.consumer` (one by id, or all) from their stored copies, through the same
 * inbox path as a delivery: the inbox row, the effect and the removal of the dead letter commit together, so a
 * replay that fails leaves the dead letter (with its new error) and no partial effect, and one that runs twice
 * applies the event once.
 */
export async function replayDeadLetters(deps: ReplayDeps, which: string | 'all'): Promise<ReplayReport> {
  const report: ReplayReport = { replayed: [], duplicates: [], failed: [], notFound: [] };
  const all = await listDeadLetters(deps.db, deps.consumer);
  const chosen = which === 'all' ? all : all.filter((d) => d.eventId === which);
  if (which !== 'all' && chosen.length === 0) report.notFound.push(which);

  for (const dead of chosen) {
    const key = { eventId: dead.eventId, consumer: deps.consumer };
    const msg: InboxMessage = { subject: dead.subject, headers: dead.headers, payload: dead.payload, deliveryCount: dead.deliveries, fallbackId: dead.eventId };
    const decoded = decodeMessage(deps.registry, msg);
    let error: string;
    if (decoded.ok) {
      try {
        const fresh = await deps.writer.write(async (tx) => {
          const applied = await applyOnce(tx, deps, decoded.event);
          await deleteDeadLetter(tx, key);
          return applied;
        });
        (fresh ? report.replayed : report.duplicates).push(dead.eventId);
        (fresh ? deps.metrics.processed : deps.metrics.duplicates).inc({ consumer: deps.consumer });
        continue;
      } catch (e) {
        error = `replay failed: ${describeError(e)}`;
      }
    } else {
      error = `replay failed: ${decoded.error}`;
    }
    await deps.writer.write((tx) => recordReplayError(tx, key, error));
    report.failed.push({ eventId: dead.eventId, error });
  }
  return report;
}

