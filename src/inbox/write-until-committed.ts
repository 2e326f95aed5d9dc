import { isInfrastructureError } from '../db/infrastructure-error.ts';
import type { Logger } from '../logger.ts';
import type { BackoffSettings } from '../worker/backoff.ts';
import { createOutageBackoff } from '../worker/outage-backoff.ts';
import { describeError, type InboxResult } from './handle-once.ts';
import type { InboxMessage } from './inbox-message.ts';
import type { InboxMetrics } from './inbox-metrics.ts';

/** Whether the subscriber's own database took the last write (`unavailable`: the runner holds messages for it). */
export type DatabaseState = 'ok' | 'unavailable';

export type BatchWrites = {
  state(): DatabaseState;
  /**
   * Writes `msgs` with `processBatch`, and while that fails (the database is locked, full, unreachable … anything
   * but a handler's own failure, which handleBatch returns as a result) backs off and writes the same messages
   * again: a failed write never counts against a message. Resolves with the results once committed, or with
   * undefined when `signal` aborts first. `failed` runs on each failure, `recovered` once the database is back.
   */
  write(msgs: InboxMessage[], signal: AbortSignal, events: { failed(): void; recovered(): void }): Promise<InboxResult[] | undefined>;
};

/** The batch writes of one subscriber, with its database state in `inbox_database_available{consumer}`. */
export function createBatchWrites(d: {
  consumer: string;
  log: Logger;
  metrics: InboxMetrics;
  processBatch: (msgs: InboxMessage[]) => Promise<InboxResult[]>;
  backoff: BackoffSettings;
}): BatchWrites {
  const labels = { consumer: d.consumer };
  let state: DatabaseState = 'ok';
  d.metrics.databaseAvailable.set(1, labels);
  return {
    state: () => state,
    async write(msgs, signal, events) {
      const outage = createOutageBackoff(d.backoff);
      for (;;) {
        try {
          const results = await d.processBatch(msgs);
          if (state === 'unavailable') {
            state = 'ok';
            d.metrics.databaseAvailable.set(1, labels);
            d.log.info('consumer: its database takes writes again; resuming', { consumer: d.consumer, failedWrites: outage.failures() });
            events.recovered();
          }
          return results;
        } catch (error) {
          d.metrics.writeFailures.inc(labels);
          events.failed();
          if (state === 'ok') {
            state = 'unavailable';
            d.metrics.databaseAvailable.set(0, labels);
            const fields = { consumer: d.consumer, messages: msgs.length };
            if (isInfrastructureError(error))
              d.log.warn('consumer: its database cannot take writes; holding the messages (no delivery spent) and retrying the same write', {
                ...fields,
                error: describeError(error),
              });
            // not an expected outage: a bug until shown otherwise, so its stack goes to the log
            else
              d.log.error('consumer: a write failed for a reason other than a handler; holding the messages and retrying the same write', { ...fields, error });
          }
          if (signal.aborted) return undefined;
          await outage.backOff(signal);
          if (signal.aborted) return undefined;
        }
      }
    },
  };
}
