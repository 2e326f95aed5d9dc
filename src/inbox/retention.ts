import type { Config } from '../config.ts';
import type { Writer } from '../db/writer.ts';
import type { Logger } from '../logger.ts';
import { compactPeriodically, deleteOlderThan, HOURLY, type CompactionSchedule, type CompactResult } from '../ops/compaction.ts';

export const DEFAULT_INBOX_RETENTION_MS = 30 * 24 * 3600 * 1000;

/** What compactInbox did, and the received_at it compared against. */
export type CompactInboxResult = CompactResult & { cutoff: number };

/**
 * Deletes inbox rows received before `now - olderThanMs`, at most `batch` per write transaction (portable
 * `DELETE … WHERE rowid IN (SELECT rowid … LIMIT ?)`), so writers are never blocked for long. Each batch commits on
 * its own; stopping half-way (or on `signal`) leaves a consistent, partly compacted inbox. Then, on a database with
 * `auto_vacuum = INCREMENTAL`, the freed pages go back to the filesystem in bounded steps (deleteInBatches, whose
 * vacuum step every compaction shares). It does not check the retention floor: callers do (assertSafeRetention).
 */
export async function compactInbox(
  deps: { writer: Writer; clock: () => Date },
  options: { olderThanMs: number; batch?: number; signal?: AbortSignal },
): Promise<CompactInboxResult> {
  return deleteOlderThan(deps, 'DELETE FROM inbox WHERE rowid IN (SELECT rowid FROM inbox WHERE received_at < ? ORDER BY received_at LIMIT ?)', options);
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

/** The floor's inputs as the service configures them: the stream's duplicate window and the consumers' redelivery settings. */
export function retentionSettingsFrom(config: Config): Omit<RetentionSettings, 'retentionMs'> {
  return {
    duplicateWindowMs: config.STREAM_DUPLICATE_WINDOW_MS,
    maxDeliver: config.CONSUMER_MAX_DELIVER,
    ackWaitMs: config.CONSUMER_ACK_WAIT_MS,
    maxBackoffMs: config.RELAY_MAX_BACKOFF_MS,
  };
}

/**
 * Deletes a subscriber's inbox rows older than `retentionMs` on `schedule` (by default a minute after start, then
 * hourly) until `signal` aborts. Failures are logged and retried at the next tick: never a reason to stop consuming.
 */
export function compactInboxPeriodically(
  deps: { writer: Writer; clock: () => Date; log: Logger; name: string },
  retentionMs: number,
  signal: AbortSignal,
  schedule: CompactionSchedule = HOURLY,
): Promise<void> {
  return compactPeriodically(
    'inbox',
    (s) => compactInbox(deps, { olderThanMs: retentionMs, signal: s }),
    { log: deps.log, fields: { consumer: deps.name } },
    schedule,
    signal,
  );
}
