import type { Database } from '../db/open-database.ts';
import type { LeaseEvents } from '../leases/lease-keeper.ts';
import type { Counter, Gauge, Histogram, Metrics } from '../metrics/metrics.ts';
import { readOutboxBacklog } from './outbox-stats.ts';
import { within } from '../worker/within.ts';

/**
 * Why the relay failed, the `reason` of outbox_publish_errors_total:
 * - `broker_unavailable`: connecting, ensuring the stream or publishing found the broker unable to take messages
 *   (connection lost, timeout, no responders, stream full); counted once per pass or connection attempt, attempts untouched.
 * - `publish_failed`: the broker refused one message for good (a JetStream API error); counted per message.
 * - `invalid_event`: a row that cannot become a message (unregistered type, payload failing its schema or not matching
 *   its columns, larger than the stream's max_msg_size); counted per row, never sent to the broker.
 * - `database_unavailable`: the outbox could not be read or marked (locked, full, unreachable); counted per back-off.
 */
export type PublishErrorReason = 'broker_unavailable' | 'publish_failed' | 'invalid_event' | 'database_unavailable';

const REASONS: readonly PublishErrorReason[] = ['broker_unavailable', 'publish_failed', 'invalid_event', 'database_unavailable'];

/** outbox_publish_errors_total by reason. */
export type PublishErrors = { inc(reason: PublishErrorReason, by?: number): void; get(reason: PublishErrorReason): number };

/** The gauges only a process that runs a relay has. */
export type RelayGauges = {
  /** outbox_relay_broker_up: 1 while the relay reaches the broker, else 0. */
  brokerUp: Gauge;
  /**
   * outbox_relay_last_pass_timestamp_seconds: the last pass without a broker or database error, or the relay's start
   * before the first one, so a relay that never gets a good pass ages like one that stopped getting them.
   */
  lastPassTimestamp: Gauge;
};

export type OutboxMetrics = {
  published: Counter;
  duplicates: Counter;
  publishErrors: PublishErrors;
  parked: Counter;
  /** outbox_publish_lag_seconds: from an event occurring to its PubAck. */
  lag: Histogram;
  /** Registers the relay's gauges in the same registry (once; later calls return the same ones). */
  relayGauges(): RelayGauges;
  /**
   * Registers the relay's lease metrics (outbox_relay_partitions_owned, outbox_relay_lease_acquisitions_total,
   * outbox_relay_lease_losses_total) and returns what a lease keeper reports to.
   */
  leaseMetrics(): LeaseEvents;
};

const LAG_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

/** Registers the relay's counters and histogram under the names the README's metrics table documents; every reason starts at 0. */
export function createOutboxMetrics(metrics: Metrics): OutboxMetrics {
  const errors = metrics.counter(
    'outbox_publish_errors_total',
    'Relay failures by reason: broker_unavailable, publish_failed, invalid_event, database_unavailable.',
  );
  // Every reason is a series from the start, so rate() and increase() see the first error of each.
  for (const reason of REASONS) errors.inc({ reason }, 0);
  return {
    published: metrics.counter('outbox_published_total', 'Outbox rows acknowledged by JetStream as newly stored.'),
    duplicates: metrics.counter('outbox_duplicates_total', 'Outbox rows acknowledged by JetStream as duplicates (already stored).'),
    publishErrors: { inc: (reason, by = 1) => errors.inc({ reason }, by), get: (reason) => errors.get({ reason }) },
    parked: metrics.counter('outbox_parked_total', 'Outbox rows the relay parked as failed after their last attempt.'),
    lag: metrics.histogram('outbox_publish_lag_seconds', 'Time from an event occurring to its PubAck.', LAG_BUCKETS),
    relayGauges: () => ({
      brokerUp: metrics.gauge('outbox_relay_broker_up', "1 while this process's relay reaches the broker, else 0."),
      lastPassTimestamp: metrics.gauge(
        'outbox_relay_last_pass_timestamp_seconds',
        "Unix time of the relay's last pass that ended without a broker or database error; its start before the first such pass.",
      ),
    }),
    leaseMetrics: () => {
      const owned = metrics.gauge('outbox_relay_partitions_owned', "Outbox partitions this process's relay leases now.");
      const acquired = metrics.counter('outbox_relay_lease_acquisitions_total', "Partition leases this process's relay acquired.");
      const lost = metrics.counter(
        'outbox_relay_lease_losses_total',
        "Partition leases another relay took from this process's relay (it had let them run out).",
      );
      owned.set(0);
      acquired.inc(undefined, 0);
      lost.inc(undefined, 0);
      return { owned: (n) => owned.set(n), acquired: (ps) => acquired.inc(undefined, ps.length), lost: (ps) => lost.inc(undefined, ps.length) };
    },
  };
}

/**
 * Registers the gauges read from the outbox table, once per scrape (one statement, see readOutboxStats). When that
 * read fails or takes longer than `waitMs` (default 1000: the database locked past its busy timeout, unreachable, a
 * remote server that does not answer), the scrape still renders every other metric
 * and these three series are left out of it: a stale backlog would look healthy, and an absent series is what
 * `absent()` alerts and dashboards show as "no data". They come back with the next scrape that reads the table.
 */
export function registerOutboxGauges(metrics: Metrics, db: Database, clock: () => Date, waitMs = 1000): void {
  const pending = metrics.gauge('outbox_pending_messages', 'Outbox rows waiting to be published.');
  const age = metrics.gauge('outbox_oldest_pending_age_seconds', 'Age of the oldest pending outbox row (0 when none is pending).');
  const failed = metrics.gauge('outbox_failed_messages', 'Outbox rows parked as failed.');
  metrics.beforeRender(async () => {
    const stats = await within(readOutboxBacklog(db, clock()), waitMs);
    if (stats) {
      pending.set(stats.pending);
      age.set(stats.oldestPendingAgeMs / 1000);
      failed.set(stats.failed);
    } else {
      pending.delete();
      age.delete();
      failed.delete();
    }
  });
}
