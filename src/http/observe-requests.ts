// One middleware around the rest of the app for everything observed per request, so a request pays for one extra
// frame and one route lookup: its SERVER span, its duration in the metrics and its access line.
import { context, type Tracer, trace } from '@opentelemetry/api';
import type { MiddlewareHandler } from 'hono';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { writeAccessLine } from './access-log.ts';
import { requestDurations } from './request-metrics.ts';
import { methodOf, routeOf, UNMATCHED } from './request-route.ts';
import { endServerSpan, startServerSpan } from './server-span.ts';

/**
 * Starts each request's SERVER span and runs the rest of the request with it active; once the response is ready,
 * ends the span, observes http_request_duration_seconds (with `metrics`) and writes the access line. Register it
 * after `requestId()`: the access line reads the id it set.
 */
export function observeRequests(deps: { tracer: Tracer; log: Logger; metrics?: Metrics | undefined }): MiddlewareHandler {
  const observe = deps.metrics ? requestDurations(deps.metrics) : undefined;
  return async function observeRequestsMiddleware(c, next) {
    const start = performance.now();
    const method = methodOf(c);
    const route = routeOf(c);
    const span = startServerSpan(deps.tracer, c, method, route);
    c.set('serverSpan', span);
    try {
      await context.with(trace.setSpan(context.active(), span), next);
    } finally {
      const status = c.res.status;
      const seconds = (performance.now() - start) / 1000;
      endServerSpan(span, status);
      observe?.(method, route ?? UNMATCHED, status, seconds);
      writeAccessLine(deps.log, c, { route: route ?? UNMATCHED, status, seconds, span });
    }
  };
}
