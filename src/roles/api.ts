import type { Hono } from 'hono';
import { createApp } from '../app.ts';
import type { Config } from '../config.ts';
import { compactIdempotencyKeys } from '../http/idempotency-retention.ts';
import { compactPeriodically } from '../ops/compaction.ts';
import { createOpsRoutes } from '../ops/ops.routes.ts';
import type { Housekeeping, RoleDeps } from './shared.ts';

/** Routes another role serves over HTTP (a subscriber's read routes), mounted at `basePath`. */
export type MountedRoutes = { basePath: string; routes: Hono<any, any, any> };

/** The HTTP side of a process. */
export type ApiRole = {
  /** The contexts' command routes with the `api` role; always /health, /ready, /metrics, /outbox/stats and the admin routes. */
  app: Hono;
  /** With the `api` role: forgets Idempotency-Keys older than IDEMPOTENCY_RETENTION. */
  housekeeping: Housekeeping[];
};

/** Builds the app every process serves, with `readiness` facts in /ready and `routes` mounted. */
export function createApiRole(config: Config, shared: RoleDeps, options: { readiness: () => Record<string, string>; routes?: readonly MountedRoutes[] }): ApiRole {
  const { deps, metrics } = shared;
  const api = config.ROLES.includes('api');
  const app = createApp(deps, {
    service: config.SERVICE_NAME,
    contexts: shared.modules.contexts,
    api,
    readiness: options.readiness,
    extend: (a) => {
      a.route('/', createOpsRoutes({ db: deps.db, clock: deps.clock, metrics, adminToken: config.ADMIN_TOKEN, outboxCommitted: deps.outboxCommitted, writer: deps.writer }));
      for (const r of options.routes ?? []) a.route(r.basePath, r.routes);
    },
  });
  const forget = (signal: AbortSignal) => compactIdempotencyKeys(deps, { olderThanMs: config.IDEMPOTENCY_RETENTION, signal });
  const housekeeping: Housekeeping[] = api ? [(schedule, signal) => compactPeriodically('idempotency keys', forget, { log: deps.log }, schedule, signal)] : [];
  return { app, housekeeping };
}
