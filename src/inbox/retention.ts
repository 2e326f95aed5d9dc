import { sql } from 'drizzle-orm';
import type { Writer } from '../db/writer.ts';
import type { Logger } from '../logger.ts';

export const DEFAULT_INBOX_RETENTION_MS = 30 * 24 * 3600 * 1000;

export type CompactInboxResult = { deleted: number; batches: number; cutoff: number };

/**
 * Deletes inbox rows received before `now - olderThanMs`, at most `batch` per write transaction (portable
 * `DELETE … WHERE rowid IN (SELECT rowid … LIMIT ?)`), so writers are never blocked for long. Each batch commits on
 * its own; stopping half-way leaves a consistent, partly compacted inbox.
 */
export async function compactInbox(
  deps: { writer: Writer; clock: () => Date },
  options: { olderThanMs: number; batch?: number },
): Promise<CompactInboxResult> {
  const batch = options.batch ?? 10_000;
  if (!Number.isInteger(batch) || batch < 1) throw new RangeError(`batch must be a positive integer (got ${batch})`);
  const cutoff = deps.clock().getTime() - options.olderThanMs;
  let deleted = 0;
  let batches = 0;
  for (;;) {
    const n = await deps.writer.write(async (tx) => {
      const res = await tx.run(
        sql`DELETE FROM inbox WHERE rowid IN (SELECT rowid FROM inbox WHERE received_at < ${cutoff} ORDER BY received_at LIMIT ${batch})`,
      );
      return res.rowsAffected;
    });
    if (n === 0) break;
    deleted += n;
    batches++;
    if (n < batch) break;
  }
  return { deleted, batches, cutoff };
}

/** The inbox would forget an event while the broker may still deliver it again. */
export class UnsafeRetentionError extends Error {
  override readonly name = 'UnsafeRetentionError';
}

export type RetentionSettings = {
  retentionMs: number;
  /** The stream's duplicate window: the relay may republish an event that long after its first PubAck. */
  duplicateWindowMs: number;
  maxDeliver: number;
  ackWaitMs: number;
  /** The longest nak delay between two deliveries. */
  maxBackoffMs: number;
};

/** Shortest safe retention: the duplicate window plus the redelivery horizon max_deliver × (ack_wait + max back-off). */
export function minimumRetentionMs(s: Omit<RetentionSettings, 'retentionMs'>): number {
  return s.duplicateWindowMs + s.maxDeliver * (s.ackWaitMs + s.maxBackoffMs);
}

/**
 * Throws UnsafeRetentionError when inbox rows could be compacted while a copy of their event can still arrive:
 * the retention must cover the stream's duplicate window plus the consumer's redelivery horizon. The message
 * names the configured retention and the minimum.
 */
export function assertSafeRetention(s: RetentionSettings): void {
  const minimum = minimumRetentionMs(s);
  if (s.retentionMs >= minimum) return;
  const horizon = minimum - s.duplicateWindowMs;
  throw new UnsafeRetentionError(
    `Refusing inbox retention of ${s.retentionMs} ms: it must be at least ${minimum} ms, the stream's duplicate window (${s.duplicateWindowMs} ms) plus the redelivery horizon (${horizon} ms = max_deliver ${s.maxDeliver} × (ack_wait ${s.ackWaitMs} ms + max back-off ${s.maxBackoffMs} ms)).`,
  );
}

/**
 * Deletes inbox rows older than `retentionMs` once an hour (and once shortly after start) until `signal` aborts.
 * Failures are logged and retried at the next tick: compaction is housekeeping, never a reason to stop consuming.
 */
export async function compactInboxPeriodically(
  deps: { writer: Writer; clock: () => Date; log: Logger; name: string },
  retentionMs: number,
  signal: AbortSignal,
  everyMs = 3_600_000,
): Promise<void> {
  let wait = Math.min(everyMs, 60_000);
  while (!signal.aborted) {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(done, wait);
      function done() {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      }
      signal.addEventListener('abort', done, { once: true });
    });
    if (signal.aborted) return;
    try {
      const result = await compactInbox(deps, { olderThanMs: retentionMs });
      if (result.deleted > 0) deps.log.info('inbox compacted', { consumer: deps.name, ...result });
    } catch (error) {
      deps.log.warn('inbox compaction failed', { consumer: deps.name, error: String(error) });
    }
    wait = everyMs;
  }
}
