import { Hono } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { requestId } from 'hono/request-id';
import { describeRoute } from 'hono-openapi';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { isBusyError, isDatabaseUnreachable } from './db/busy.ts';
import type { Deps } from './deps.ts';
import { AppError, NotFoundError, ServiceUnavailableError, toProblem } from './errors.ts';
import { mountApiDescription } from './http/api-description.ts';
import { bodyLimit } from './http/body-limit.ts';
import type { Context } from './http/define-context.ts';
import { describeQuery, jsonResponse } from './http/describe-route.ts';
import { createReadinessCheck, type ReadinessSources } from './http/readiness.ts';
import { observeRequests } from './http/observe-requests.ts';
import { serverSpanOf } from './http/server-span.ts';
import type { Metrics } from './metrics/metrics.ts';
import { readOutboxStats } from './outbox/outbox-stats.ts';
import { badRequestTarget, isUnbuildableRequest } from './http/request-target.ts';
import { DEFAULT_SERVICE_NAME } from './service-name.ts';
import { traceFields } from './telemetry/trace-context.ts';

export const MAX_BODY_BYTES = 64 * 1024;

export type AppOptions = {
  /** The service's name, in problem-type URIs (default: hono-outbox). */
  service?: string;
  /** The service's version, in /openapi.json (the entries pass package.json's; default 0.0.0). */
  version?: string;
  /** The contexts whose routes the `api` role serves, each at its basePath. */
  contexts?: readonly Context[];
  /** Serve the contexts' routes (the `api` role); false leaves only the operational endpoints. */
  api?: boolean;
  /** The roles this process runs and their parts, judged by /ready (default: the api role alone, or none without it). */
  roles?: ReadinessSources;
  /** Extra readiness facts (e.g. `{ nats: 'published by the cron trigger' }`); reported, they do not change /ready. */
  readiness?: () => Record<string, string>;
  /** Where http_request_duration_seconds is observed; without it, requests are not measured. */
  metrics?: Metrics;
  /** Mounts routes owned by other parts (metrics, admin, read models). */
  extend?: (app: Hono) => void;
};

/**
 * Builds the HTTP app from its dependencies; Web Standard APIs only, so every runtime can serve `app.fetch`. Every
 * request gets an X-Request-Id (a valid incoming one is kept), a SERVER span, an access log line and, with
 * `metrics`, its duration in http_request_duration_seconds.
 */
export function createApp(deps: Deps, options: AppOptions = {}): Hono {
  const app = new Hono();

  app.use(
    '*',
    requestId({ limitLength: 128 }),
    observeRequests({ tracer: deps.tracer, log: deps.log, metrics: options.metrics }),
    bodyLimit({
      maxSize: MAX_BODY_BYTES,
      onError: () => {
        throw new AppError(413, 'payload-too-large', 'Payload too large', `The body exceeds ${MAX_BODY_BYTES} bytes.`);
      },
    }),
  );

  if (options.api !== false) for (const context of options.contexts ?? []) app.route(context.basePath, context.routes(deps));

  app.get('/health', describeQuery('Liveness: the process answers'), (c) => c.json({ status: 'ok' }));

  const ready = createReadinessCheck(deps, options.roles ?? { roles: options.api === false ? [] : ['api'] });
  app.get('/ready', describeReady, async (c) => {
    const report = await ready();
    return c.json({ ...options.readiness?.(), ...report }, report.status === 'unavailable' ? 503 : 200);
  });

  app.get('/outbox/stats', describeQuery('Outbox statistics: the backlog by status'), async (c) => c.json(await readOutboxStats(deps.db, deps.clock())));

  options.extend?.(app);
  mountApiDescription(app, { title: options.service ?? DEFAULT_SERVICE_NAME, version: options.version ?? '0.0.0' });

  app.notFound((c) => {
    const err = new NotFoundError(`No route for ${c.req.method} ${c.req.path}.`);
    return c.json(toProblem(err, c.req.path, options.service), 404, { 'Content-Type': 'application/problem+json' });
  });

  app.onError((error, c) => {
    const appError = toAppError(error);
    // 503 (busy) and 501 (a transfer coding this service does not take) are answers, not failures of the service
    if (appError.status >= 500 && appError.status !== 503 && appError.status !== 501) {
      // the trace ids explicitly: where no context manager carries the span (Workers), the active context has none
      const span = serverSpanOf(c);
      deps.log.error('unhandled error', { path: c.req.path, request_id: c.get('requestId'), ...(span ? traceFields(span.spanContext()) : {}), error });
    }
    return c.json(toProblem(appError, c.req.path, options.service), appError.status as ContentfulStatusCode, {
      'Content-Type': 'application/problem+json',
      ...appError.headers,
    });
  });

  return app;
}

const describeReady = describeRoute({
  summary: 'Readiness of this process: each of its roles, and whether it can do its work',
  description:
    '`unavailable` (503) only when something this process must do cannot happen: the service database does not answer ' +
    '(with the api or relay role), or one of its roles has stopped for good. `degraded` (200) when the broker is ' +
    'unreachable, the relay has not completed a pass for longer than its threshold, a subscriber’s database is held, ' +
    'or dead letters exist — the reasons are listed in `reasons`. Otherwise `ready`. A broker outage does not fail ' +
    'readiness: the outbox keeps accepting commands and publishes them once the broker is back. /health is liveness.',
  responses: {
    200: jsonResponse('`ready`, or `degraded` with its `reasons`: the process can do its work.'),
    503: jsonResponse('`unavailable`, with its `reasons`: the service database does not answer or a role stopped.'),
  },
});

function toAppError(error: unknown): AppError {
  if (error instanceof AppError) return error;
  if (isUnbuildableRequest(error)) return badRequestTarget();
  if (isBusyError(error)) return new ServiceUnavailableError('The database is busy; retry shortly.', 1);
  if (isDatabaseUnreachable(error)) return new ServiceUnavailableError('The database cannot be reached; retry shortly.', 1);
  if (error instanceof HTTPException) {
    const title = error.status === 400 ? 'Bad request' : 'HTTP error';
    return new AppError(error.status, error.status === 400 ? 'bad-request' : 'http-error', title, error.message || title);
  }
  return new AppError(500, 'internal', 'Internal error', 'The request could not be processed.');
}
