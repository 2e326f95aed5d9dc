import type { Context } from 'hono';
import type { Logger } from '../logger.ts';
import type { Span } from '@opentelemetry/api';
import { traceFields } from '../telemetry/trace-context.ts';
import { PROBE_PATHS } from './request-route.ts';

/**
 * Writes the `request` line of `c` once its response is ready: method, route pattern, path, status, duration_ms,
 * request_id and the SERVER span's trace_id/span_id (explicitly, so the line names its trace even where no context
 * manager carries the span, as on Workers). Probes (/health, /ready, /metrics, /status.json) log at debug.
 */
export function writeAccessLine(log: Logger, c: Context, r: { route: string; status: number; seconds: number; span: Span }): void {
  const fields = {
    method: c.req.method,
    route: r.route,
    path: c.req.path,
    status: r.status,
    duration_ms: Math.round(r.seconds * 1_000_000) / 1000,
    request_id: c.get('requestId'),
    ...traceFields(r.span.spanContext()),
  };
  if (PROBE_PATHS.has(c.req.path)) log.debug('request', fields);
  else log.info('request', fields);
}
