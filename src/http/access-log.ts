import type { MiddlewareHandler } from 'hono';
import type { Logger } from '../logger.ts';
import { traceFields } from '../telemetry/trace-context.ts';
import { PROBE_PATHS, routeOf, UNMATCHED } from './request-route.ts';
import { serverSpanOf } from './server-span.ts';

/**
 * Writes one `request` line per request once its response is ready: method, route pattern, path, status,
 * duration_ms, request_id and the SERVER span's trace_id/span_id (explicitly, so the line names its trace even where
 * no context manager carries the span, as on Workers). Probes (/health, /ready, /metrics, /status.json) log at debug.
 * Register it after `requestId()` and before `serverSpan()`: it reads what both set.
 */
export function accessLog(log: Logger): MiddlewareHandler {
  return async function accessLogMiddleware(c, next) {
    const start = performance.now();
    await next();
    const span = serverSpanOf(c);
    const fields = {
      method: c.req.method,
      route: routeOf(c) ?? UNMATCHED,
      path: c.req.path,
      status: c.res.status,
      duration_ms: Math.round((performance.now() - start) * 1000) / 1000,
      request_id: c.get('requestId'),
      ...(span ? traceFields(span.spanContext()) : {}),
    };
    if (PROBE_PATHS.has(c.req.path)) log.debug('request', fields);
    else log.info('request', fields);
  };
}
