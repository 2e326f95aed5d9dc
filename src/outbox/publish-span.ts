import { type Span, SpanKind, SpanStatusCode, type Tracer } from '@opentelemetry/api';
import { parseTraceHeaders, startSpan } from '../telemetry/trace-context.ts';

/**
 * Starts the PRODUCER span `publish <event type>` of one row's publish to `subject`, a child of the trace context stored with the row (`stored`
 * holds its traceparent and tracestate) or the root of a new trace when it has none (rows stored before tracing, or
 * by a command without a traceparent). `outbox.attempt` counts from 1: the row's earlier failures plus this try.
 */
export function startPublishSpan(
  tracer: Tracer,
  subject: string,
  row: { id: string; attempts: number | null; message_type: string },
  stored: Record<string, unknown> | undefined,
): Span {
  // named by the event type, not the subject: a subject holds the aggregate id, and span names must stay few
  return startSpan(tracer, `publish ${row.message_type}`, {
    kind: SpanKind.PRODUCER,
    parent: stored && parseTraceHeaders(stored.traceparent, stored.tracestate),
    attributes: {
      'messaging.system': 'nats',
      'messaging.operation.type': 'send',
      'messaging.destination.name': subject,
      'messaging.message.id': row.id,
      'outbox.attempt': (row.attempts ?? 0) + 1,
    },
  });
}

/** Ends a publish span at its PubAck; `outbox.duplicate` says whether JetStream already held the message. */
export function endPublishSpan(span: Span, duplicate: boolean): void {
  span.setAttribute('outbox.duplicate', duplicate);
  span.end();
}

/** Ends a publish span whose row was not published: status ERROR, with the error recorded as an exception event. */
export function failPublishSpan(span: Span, error: unknown): void {
  const message = error instanceof Error ? error.message : String(error);
  span.recordException(error instanceof Error ? error : message);
  span.setStatus({ code: SpanStatusCode.ERROR, message });
  span.end();
}
