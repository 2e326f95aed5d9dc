import { registryOf, type Modules } from '../compose/define-modules.ts';
import type { Database } from '../db/open-database.ts';
import { createDeps, type Deps } from '../deps.ts';
import type { Logger } from '../logger.ts';
import { createMetrics, type Metrics } from '../metrics/metrics.ts';
import type { CompactionSchedule } from '../ops/compaction.ts';
import { createOutboxMetrics, registerOutboxGauges, type OutboxMetrics } from '../outbox/outbox-metrics.ts';
import { recordRecentLogs, type RecentLogs } from '../recent-logs.ts';
import type { Signal } from '../signal.ts';

/**
 * What the roles of one process share: its composition, the service database's deps (one write queue), its metrics,
 * and the last warn/error lines logged through `deps.log` (for the status page).
 */
export type RoleDeps = { modules: Modules; deps: Deps; metrics: Metrics; outboxMetrics: OutboxMetrics; recentLogs: RecentLogs };

/** Periodic work a role leaves to its process, run on `schedule` until `signal` aborts; a failure never ends it. */
export type Housekeeping = (schedule: CompactionSchedule, signal: AbortSignal) => Promise<void>;

/**
 * The shared deps over the service database `db`, with a new metrics registry holding the outbox counters and the
 * backlog gauges. `outboxCommitted` is what a commit notifies (the relays' wake-up); a signal nobody waits on if omitted.
 * `deps.log` is `log` recording its warnings and errors in `recentLogs`.
 */
export function createRoleDeps(db: Database, io: { modules: Modules; log: Logger; clock?: () => Date; outboxCommitted?: Signal }): RoleDeps {
  const clock = io.clock ?? (() => new Date());
  const metrics = createMetrics();
  const outboxMetrics = createOutboxMetrics(metrics);
  registerOutboxGauges(metrics, db, clock);
  const { log, recent } = recordRecentLogs(io.log, { clock });
  const deps = createDeps(db, log, registryOf(io.modules), { clock, ...(io.outboxCommitted ? { outboxCommitted: io.outboxCommitted } : {}) });
  return { modules: io.modules, deps, metrics, outboxMetrics, recentLogs: recent };
}
