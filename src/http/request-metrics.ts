import type { MiddlewareHandler } from 'hono';
import type { Metrics } from '../metrics/metrics.ts';
import { methodOf, routeOf, statusClassOf, UNMATCHED } from './request-route.ts';

/** Upper bounds of http_request_duration_seconds, from 1 ms to 10 s. */
export const HTTP_DURATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/**
 * Observes each request's duration in `http_request_duration_seconds{method, route, status_class}`, route being
 * the matched pattern (`unmatched` for a 404 no route matched), never the raw path.
 */
export function requestMetrics(metrics: Metrics): MiddlewareHandler {
  const duration = metrics.histogram(
    'http_request_duration_seconds',
    'Duration of HTTP requests until the response is ready, by method, route pattern and status class.',
    HTTP_DURATION_BUCKETS,
    { labelled: true },
  );
  return async function requestMetricsMiddleware(c, next) {
    const start = performance.now();
    await next();
    duration.observe((performance.now() - start) / 1000, { method: methodOf(c), route: routeOf(c) ?? UNMATCHED, status_class: statusClassOf(c.res.status) });
  };
}
