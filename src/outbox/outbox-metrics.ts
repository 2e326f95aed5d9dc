import type { Database } from '../db/open-database.ts';
import type { Counter, Histogram, Metrics } from '../metrics/metrics.ts';
import { readOutboxBacklog } from './outbox-stats.ts';

export type OutboxMetrics = {
  published: Counter;
  duplicates: Counter;
  publishErrors: Counter;
  lag: Histogram;
};

const LAG_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

/** Registers the relay's counters and histogram under the names the README's metrics table documents. */
export function createOutboxMetrics(metrics: Metrics): OutboxMetrics {
  return {
    published: metrics.counter('outbox_published_total', 'Outbox rows acknowledged by JetStream as newly stored.'),
    duplicates: metrics.counter('outbox_duplicates_total', 'Outbox rows acknowledged by JetStream as duplicates (already stored).'),
    publishErrors: metrics.counter('outbox_publish_errors_total', 'Relay passes ended by an unavailable broker, plus per-message publish failures.'),
    lag: metrics.histogram('outbox_lag_seconds', 'Time from an event occurring to its PubAck.', LAG_BUCKETS),
  };
}

/** Registers the gauges read from the outbox table, once per scrape. */
export function registerOutboxGauges(metrics: Metrics, db: Database, clock: () => Date): void {
  const pending = metrics.gauge('outbox_pending_count', 'Outbox rows waiting to be published.');
  const age = metrics.gauge('outbox_pending_seconds', 'Age of the oldest pending outbox row.');
  const failed = metrics.gauge('outbox_failed_count', 'Outbox rows parked as failed (dead letters).');
  metrics.beforeRender(async () => {
    const stats = await readOutboxBacklog(db, clock());
    pending.set(stats.pending);
    age.set(stats.oldestPendingAgeMs / 1000);
    failed.set(stats.failed);
  });
}
