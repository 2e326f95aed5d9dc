// The CONSUMER span of one delivered message: child of the trace its headers carry, active while its handler runs
// (so the handler's own spans and log lines join the trace), ended once the write that holds its outcome is over.
import { context, type Span, SpanKind, SpanStatusCode, type Tracer, trace } from '@opentelemetry/api';
import { parseTraceHeaders, startSpan } from '../telemetry/trace-context.ts';
import type { InboxOutcome } from './handle-once.ts';
import type { InboxMessage } from './inbox-message.ts';

/** The `inbox.outcome` attribute: what the write did with the message. */
export type SpanOutcome = 'applied' | 'duplicate' | 'ignored' | 'dead_letter' | 'retry' | 'deferred';

const SPAN_OUTCOME: Record<InboxOutcome, SpanOutcome> = {
  processed: 'applied',
  duplicate: 'duplicate',
  ignored: 'ignored',
  'dead-lettered': 'dead_letter',
  retry: 'retry',
  deferred: 'deferred',
};

/**
 * Starts `process <event type>` (`process invalid` for a body that is no valid event) for `msg` (durable consumer `group`) as a child of its `traceparent`
 * and `tracestate` headers, or in a new trace when it has none; without an SDK, a non-recording span with fresh ids.
 */
export function startMessageSpan(tracer: Tracer, msg: InboxMessage, event: { eventId: string; type?: string | undefined }, group: string): Span {
  // named by the event type, not the subject: a subject holds the aggregate id, and span names must stay few
  return startSpan(tracer, `process ${event.type ?? 'invalid'}`, {
    kind: SpanKind.CONSUMER,
    parent: parseTraceHeaders(msg.headers.traceparent, msg.headers.tracestate),
    attributes: {
      'messaging.system': 'nats',
      'messaging.operation.type': 'process',
      'messaging.destination.name': msg.subject,
      'messaging.message.id': event.eventId,
      'messaging.consumer.group.name': group,
    },
  });
}

/** Runs `fn` with `span` active, so the spans it starts and the lines it logs name the span's trace. */
export function runInSpan<T>(span: Span, fn: () => T): T {
  return context.with(trace.setSpan(context.active(), span), fn);
}

/** Marks `span` failed (ERROR status, the exception recorded when `error` is one); it stays open. */
export function failSpan(span: Span, error: unknown, message: string): void {
  if (!span.isRecording()) return;
  if (error instanceof Error) span.recordException(error);
  span.setStatus({ code: SpanStatusCode.ERROR, message });
}

/** Ends `span` with `inbox.outcome` set from `outcome`; call once the write that decided it is over. */
export function endMessageSpan(span: Span, outcome: InboxOutcome): void {
  span.setAttribute('inbox.outcome', SPAN_OUTCOME[outcome]);
  span.end();
}
