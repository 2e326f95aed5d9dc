// The SERVER span of each request, continuing the caller's W3C trace context (or starting a trace), active while the
// request is handled so log lines and the outbox rows of a command name it.
import { context, isSpanContextValid, type Span, type SpanContext, SpanKind, SpanStatusCode, type Tracer, trace } from '@opentelemetry/api';
import type { Context } from 'hono';
import { parseTraceHeaders, startSpan } from '../telemetry/trace-context.ts';

declare module 'hono' {
  interface ContextVariableMap {
    /** The request's SERVER span (set by observeRequests). */
    serverSpan: Span;
  }
}

/** The span active where the request arrived, if a runtime instrumentation opened one. */
function activeSpanContext(): SpanContext | undefined {
  const sc = trace.getSpanContext(context.active());
  return sc && isSpanContextValid(sc) ? sc : undefined;
}

/** The request's SERVER span, or undefined in an app without the observeRequests middleware. */
export const serverSpanOf = (c: Context): Span | undefined => c.get('serverSpan');

/**
 * Starts the SERVER span of request `c` (`method`, matched `route`), child of the span a runtime's own
 * instrumentation opened for it (Deno's OTEL_DENO, an HTTP instrumentation) or else of a valid incoming
 * `traceparent` (with its `tracestate`), named `METHOD /route/pattern` with the HTTP semantic-convention attributes.
 */
export function startServerSpan(tracer: Tracer, c: Context, method: string, route: string | undefined): Span {
  return startSpan(tracer, route ? `${method} ${route}` : method, {
    kind: SpanKind.SERVER,
    parent: activeSpanContext() ?? parseTraceHeaders(c.req.header('traceparent'), c.req.header('tracestate')),
    attributes: {
      'http.request.method': method,
      'url.path': c.req.path,
      'url.scheme': c.req.url.startsWith('https:') ? 'https' : 'http',
      ...(route ? { 'http.route': route } : {}),
    },
  });
}

/** Ends a SERVER span with `http.response.status_code`, and ERROR status on a 5xx. */
export function endServerSpan(span: Span, status: number): void {
  span.setAttribute('http.response.status_code', status);
  if (status >= 500) {
    span.setAttribute('error.type', String(status));
    span.setStatus({ code: SpanStatusCode.ERROR });
  }
  span.end();
}
