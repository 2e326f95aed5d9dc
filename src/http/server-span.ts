// The SERVER span of each request, continuing the caller's W3C trace context (or starting a trace), active while the
// request is handled so log lines and the outbox rows of a command name it.
import { context, isSpanContextValid, type Span, type SpanContext, SpanKind, SpanStatusCode, type Tracer, trace } from '@opentelemetry/api';
import type { Context, MiddlewareHandler } from 'hono';
import { parseTraceHeaders, startSpan } from '../telemetry/trace-context.ts';
import { methodOf, routeOf } from './request-route.ts';

declare module 'hono' {
  interface ContextVariableMap {
    /** The request's SERVER span (set by serverSpan). */
    serverSpan: Span;
  }
}

/** The span active where the request arrived, if a runtime instrumentation opened one. */
function activeSpanContext(): SpanContext | undefined {
  const sc = trace.getSpanContext(context.active());
  return sc && isSpanContextValid(sc) ? sc : undefined;
}

/** The request's SERVER span, or undefined in an app without the serverSpan middleware. */
export const serverSpanOf = (c: Context): Span | undefined => c.get('serverSpan');

/**
 * Starts a SERVER span per request, child of the span a runtime's own instrumentation opened for it (Deno's
 * OTEL_DENO, an HTTP instrumentation) or else of a valid incoming `traceparent` (with its `tracestate`), named
 * `METHOD /route/pattern` with the HTTP semantic-convention attributes; runs the rest of the request with it active
 * and ends it once the response is ready, with `http.response.status_code` and ERROR status on a 5xx.
 */
export function serverSpan(tracer: Tracer): MiddlewareHandler {
  return async function serverSpanMiddleware(c, next) {
    const method = methodOf(c);
    const route = routeOf(c);
    const span = startSpan(tracer, route ? `${method} ${route}` : method, {
      kind: SpanKind.SERVER,
      parent: activeSpanContext() ?? parseTraceHeaders(c.req.header('traceparent'), c.req.header('tracestate')),
      attributes: {
        'http.request.method': method,
        'url.path': c.req.path,
        'url.scheme': c.req.url.startsWith('https:') ? 'https' : 'http',
        ...(route ? { 'http.route': route } : {}),
      },
    });
    c.set('serverSpan', span);
    try {
      await context.with(trace.setSpan(context.active(), span), next);
    } finally {
      const status = c.res.status;
      span.setAttribute('http.response.status_code', status);
      if (status >= 500) {
        span.setAttribute('error.type', String(status));
        span.setStatus({ code: SpanStatusCode.ERROR });
      }
      span.end();
    }
  };
}
