import type { Context } from 'hono';
import type { OutboxHeaders } from '../outbox/append-to-outbox.ts';
import { CORRELATION } from '../outbox/event-headers.ts';
import { parseTraceHeaders, traceHeadersOf } from '../telemetry/trace-context.ts';
import { serverSpanOf } from './server-span.ts';

/**
 * The headers a command's outbox rows carry: the trace context of the request's SERVER span (so the relay's
 * producer span becomes its child; the incoming `traceparent`/`tracestate` in an app without serverSpan) and the
 * correlation id — a valid X-Correlation-Id, else the request id (requestId middleware, or a valid X-Request-Id).
 */
export function outboxHeadersFrom(c: Context): OutboxHeaders {
  const sc = serverSpanOf(c)?.spanContext() ?? parseTraceHeaders(c.req.header('traceparent'), c.req.header('tracestate'));
  const headers: OutboxHeaders = sc ? traceHeadersOf(sc) : {};
  const correlationId = [c.req.header('X-Correlation-Id'), c.get('requestId'), c.req.header('X-Request-Id')].find(
    (id) => id !== undefined && CORRELATION.test(id),
  );
  if (correlationId) headers.correlationId = correlationId;
  return headers;
}
