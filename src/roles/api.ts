import type { Hono } from 'hono';
import { createApp } from '../app.ts';
import type { Config } from '../config.ts';
import { describeEvents } from '../events/asyncapi.ts';
import { compactIdempotencyKeys } from '../http/idempotency-retention.ts';
import { compactPeriodically } from '../ops/compaction.ts';
import { createOpsRoutes } from '../ops/ops.routes.ts';
import { createStatusRoutes } from '../ops/status.routes.ts';
import type { StatusSources } from '../ops/status.ts';
import { relayStaleAfterMs, type ReadinessSources } from '../http/readiness.ts';
import type { BrokerState } from '../worker/broker-state.ts';
import type { Housekeeping, RoleDeps } from './shared.ts';
import { describeQuery } from '../http/describe-route.ts';

/** Routes another role serves over HTTP (a subscriber's read routes), mounted at `basePath`. */
export type MountedRoutes = { basePath: string; routes: Hono<any, any, any> };

/** The HTTP side of a process. */
export type ApiRole = {
  /** The contexts' command routes and GET /asyncapi.json with the `api` role; always /health, /ready, /metrics, /outbox/stats and the admin routes. */
  app: Hono;
  /** With the `api` role: forgets Idempotency-Keys older than IDEMPOTENCY_RETENTION. */
  housekeeping: Housekeeping[];
};

/** What the status page shows of this process's other roles: its relay's broker state, its subscribers. */
export type StatusParts = { relay?: { state: () => BrokerState } | undefined; subscribers?: StatusSources['subscribers'] };

/** This process's other roles as /ready judges them: its relay, its subscriber runners and their backlog. */
export type RunningParts = Pick<ReadinessSources, 'relay' | 'subscribers'>;

/**
 * Builds the app every process serves: /ready judging the api role (from ROLES) and the `running` parts, with the
 * extra `readiness` facts; `routes` mounted; the status page (GET / and /status.json) showing `status`; every request
 * measured in `shared.metrics`.
 */
export function createApiRole(
  config: Config,
  shared: RoleDeps,
  options: { readiness?: () => Record<string, string>; running?: RunningParts; routes?: readonly MountedRoutes[]; version?: string; status?: StatusParts },
): ApiRole {
  const { deps, metrics } = shared;
  const api = config.ROLES.includes('api');
  const { relay, subscribers } = options.running ?? {};
  const app = createApp(deps, {
    service: config.SERVICE_NAME,
    ...(options.version ? { version: options.version } : {}),
    contexts: shared.modules.contexts,
    api,
    metrics,
    roles: {
      roles: [...(api ? ['api'] : []), ...(relay ? ['relay'] : []), ...(subscribers ? ['consumers'] : [])],
      relay,
      relayStaleAfterMs: relayStaleAfterMs({ pollMs: config.RELAY_POLL_MS, maxBackoffMs: config.RELAY_MAX_BACKOFF_MS }),
      subscribers,
    },
    ...(options.readiness ? { readiness: options.readiness } : {}),
    extend: (a) => {
      a.route(
        '/',
        createOpsRoutes({
          db: deps.db,
          clock: deps.clock,
          metrics,
          adminToken: config.ADMIN_TOKEN,
          outboxCommitted: deps.outboxCommitted,
          writer: deps.writer,
        }),
      );
      for (const r of options.routes ?? []) a.route(r.basePath, r.routes);
      const status = options.status ?? {};
      a.route(
        '/',
        createStatusRoutes({
          service: config.SERVICE_NAME,
          db: deps.db,
          clock: deps.clock,
          admin: config.ADMIN_TOKEN !== undefined,
          adminToken: config.ADMIN_TOKEN,
          recentLogs: shared.recentLogs,
          relay: status.relay && { state: status.relay.state, lag: shared.outboxMetrics.lag },
          subscribers: status.subscribers,
        }),
      );
      if (api)
        a.get('/asyncapi.json', describeQuery('AsyncAPI 3 description of the events'), (c) =>
          c.json(describeEvents(shared.modules, { service: config.SERVICE_NAME, prefix: config.EVENTS_SUBJECT_PREFIX, natsUrl: config.NATS_URL })),
        );
    },
  });
  const forget = (signal: AbortSignal) => compactIdempotencyKeys(deps, { olderThanMs: config.IDEMPOTENCY_RETENTION, signal });
  const housekeeping: Housekeeping[] = api ? [(schedule, signal) => compactPeriodically('idempotency keys', forget, { log: deps.log }, schedule, signal)] : [];
  return { app, housekeeping };
}
