import type { Counter, Gauge, Metrics } from '../metrics/metrics.ts';

/** The inbox metrics; every value carries `{consumer}`. */
export type InboxMetrics = {
  processed: Counter;
  duplicates: Counter;
  deadLetters: Counter;
  /** Batch writes that failed for a reason other than a handler; the same write is retried, no delivery is spent. */
  writeFailures: Counter;
  /** 1 while the subscriber's database takes writes, 0 while the runner is holding messages for it. */
  databaseAvailable: Gauge;
};

// A gauge registers a renderer each time it is created; several runners share one registry and one gauge.
const availability = new WeakMap<Metrics, Gauge>();

/** Registers (or returns the already registered) inbox metrics; several runners may share one registry. */
export function createInboxMetrics(metrics: Metrics): InboxMetrics {
  let databaseAvailable = availability.get(metrics);
  if (!databaseAvailable) {
    databaseAvailable = metrics.gauge(
      'inbox_database_available',
      "1 while a subscriber's database takes writes, 0 while its runner holds messages until it does.",
    );
    availability.set(metrics, databaseAvailable);
  }
  return {
    processed: metrics.counter('inbox_processed_total', 'Events applied by a subscriber (inbox row and effect committed).'),
    duplicates: metrics.counter('inbox_duplicates_total', 'Deliveries recognised by the inbox as already applied, and acknowledged.'),
    deadLetters: metrics.counter('inbox_dead_letters_total', 'Messages a subscriber stored as dead letters and terminated.'),
    writeFailures: metrics.counter(
      'inbox_infrastructure_errors_total',
      "Batch writes that failed because the subscriber's database could not take them (busy, I/O error, disk full, closed …); retried without spending a delivery.",
    ),
    databaseAvailable,
  };
}
