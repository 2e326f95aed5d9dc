import type { Counter, Gauge, Histogram, Metrics } from '../metrics/metrics.ts';

/** The inbox metrics; every value carries `{consumer}`. */
export type InboxMetrics = {
  processed: Counter;
  duplicates: Counter;
  /** Registered events of types the subscriber does not apply, acknowledged untouched. */
  ignored: Counter;
  deadLetters: Counter;
  /** Batch writes that failed for a reason other than a handler; the same write is retried, no delivery is spent. */
  writeFailures: Counter;
  /** 1 while the subscriber's database takes writes, 0 while the runner is holding messages for it. */
  databaseAvailable: Gauge;
  /** Seconds one handler call took inside its batch transaction (failed calls included). */
  handlerDuration: Histogram;
};

const HANDLER_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/** Registers (or returns the already registered) inbox metrics; several runners may share one registry. */
export function createInboxMetrics(metrics: Metrics): InboxMetrics {
  return {
    processed: metrics.counter('inbox_processed_total', 'Events applied by a subscriber (inbox row and effect committed).'),
    duplicates: metrics.counter('inbox_duplicates_total', 'Deliveries recognised by the inbox as already applied, and acknowledged.'),
    ignored: metrics.counter('inbox_ignored_total', 'Registered events of a type the subscriber does not apply, acknowledged without an inbox row.'),
    deadLetters: metrics.counter('inbox_dead_letters_total', 'Messages a subscriber stored as dead letters and terminated.'),
    writeFailures: metrics.counter(
      'inbox_infrastructure_errors_total',
      "Batch writes that failed because the subscriber's database could not take them (busy, I/O error, disk full, closed …); retried without spending a delivery.",
    ),
    databaseAvailable: metrics.gauge(
      'inbox_database_available',
      "1 while a subscriber's database takes writes, 0 while its runner holds messages until it does.",
    ),
    handlerDuration: metrics.histogram(
      'inbox_handler_duration_seconds',
      "Time of one call of a subscriber's handler inside its batch transaction.",
      HANDLER_BUCKETS,
      { labelled: true },
    ),
  };
}

/** Starts every counter of `consumer` at 0, so rate() and increase() see its first increment. */
export function startInboxCounters(m: InboxMetrics, consumer: string): void {
  for (const c of [m.processed, m.duplicates, m.ignored, m.deadLetters, m.writeFailures]) c.inc({ consumer }, 0);
}
