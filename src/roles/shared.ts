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

/** The runtime a process runs on, as hono_outbox_build_info names it. */
export type Runtime = 'node' | 'bun' | 'deno' | 'workerd';

/** What hono_outbox_build_info says about the process. */
export type BuildInfo = { service: string; version: string; runtime: Runtime };

/** Sets `hono_outbox_build_info{service, version, runtime}` to 1 in `metrics` (once per registry, which is once per process). */
export function registerBuildInfo(metrics: Metrics, build: BuildInfo): void {
  metrics.gauge('hono_outbox_build_info', 'Always 1: the service, its version and the runtime it runs on.').set(1, build);
}

/** Periodic work a role leaves to its process, run on `schedule` until `signal` aborts; a failure never ends it. */
export type Housekeeping = (schedule: CompactionSchedule, signal: AbortSignal) => Promise<void>;

/**
 * The shared deps over the service database `db`, with a new metrics registry holding the outbox counters and the
 * backlog gauges. `outboxCommitted` is what a commit notifies (the relays' wake-up); a signal nobody waits on if omitted.
 * `deps.log` is `log` recording its warnings and errors in `recentLogs`. With `build`, the registry carries
 * hono_outbox_build_info.
 */
export function createRoleDeps(db: Database, io: { modules: Modules; log: Logger; clock?: () => Date; outboxCommitted?: Signal; build?: BuildInfo }): RoleDeps {
  const clock = io.clock ?? (() => new Date());
  const metrics = createMetrics();
  if (io.build) registerBuildInfo(metrics, io.build);
  const outboxMetrics = createOutboxMetrics(metrics);
  registerOutboxGauges(metrics, db, clock);
  const { log, recent } = recordRecentLogs(io.log, { clock });
  const deps = createDeps(db, log, registryOf(io.modules), { clock, ...(io.outboxCommitted ? { outboxCommitted: io.outboxCommitted } : {}) });
  return { modules: io.modules, deps, metrics, outboxMetrics, recentLogs: recent };
}

/**
 * This process's unique name among the relays and subscriber instances sharing leases: INSTANCE_NAME (or `instance`)
 * and a random suffix, so a restarted process never inherits the leases of its previous life.
 */
export function instanceIdOf(config: { INSTANCE_NAME?: string | undefined }): string {
  return `${config.INSTANCE_NAME ?? 'instance'}-${crypto.randomUUID().slice(0, 8)}`;
}
