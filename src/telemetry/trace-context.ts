// W3C trace context and spans through @opentelemetry/api: real spans when an SDK is registered, and ids that still
// join logs and messages when none is (the API alone records nothing).
import {
  type Attributes,
  createTraceState,
  isSpanContextValid,
  type Link,
  ROOT_CONTEXT,
  type Span,
  type SpanContext,
  type SpanKind,
  type Tracer,
  trace,
} from '@opentelemetry/api';

/** A W3C `traceparent` header value: version, trace id, parent span id, flags (lower-case hex). */
export const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
/** A W3C `tracestate` header value short enough to carry (at most 512 printable ASCII characters). */
const TRACESTATE = /^[\x20-\x7e]{1,512}$/;

/** The trace context an outbox row or a message carries. */
export type TraceHeaders = { traceparent?: string; tracestate?: string };

/** The span context a valid `traceparent` (and optional `tracestate`) describes, marked remote; undefined if invalid. */
export function parseTraceHeaders(traceparent: unknown, tracestate?: unknown): SpanContext | undefined {
  if (typeof traceparent !== 'string') return undefined;
  const m = TRACEPARENT.exec(traceparent);
  if (!m || m[1] === 'ff') return undefined;
  const sc: SpanContext = { traceId: m[2]!, spanId: m[3]!, traceFlags: Number.parseInt(m[4]!, 16) & 1, isRemote: true };
  if (typeof tracestate === 'string' && TRACESTATE.test(tracestate)) sc.traceState = createTraceState(tracestate);
  return isSpanContextValid(sc) ? sc : undefined;
}

/** The `traceparent` (and `tracestate` when there is one) that continues `sc`. */
export function traceHeadersOf(sc: SpanContext): TraceHeaders {
  const flags = (sc.traceFlags & 0xff).toString(16).padStart(2, '0');
  const headers: TraceHeaders = { traceparent: `00-${sc.traceId}-${sc.spanId}-${flags}` };
  const state = sc.traceState?.serialize();
  if (state) headers.tracestate = state;
  return headers;
}

/** The log fields naming `sc`: `trace_id` and `span_id`. */
export const traceFields = (sc: SpanContext): { trace_id: string; span_id: string } => ({ trace_id: sc.traceId, span_id: sc.spanId });

/** The log fields of the span active in the current context, if any (empty without a context manager). */
export function activeTraceFields(): { trace_id: string; span_id: string } | undefined {
  const sc = trace.getActiveSpan()?.spanContext();
  return sc && isSpanContextValid(sc) ? traceFields(sc) : undefined;
}

// From randomUUID rather than getRandomValues: runtimes draw its entropy in bulk, so an id costs a fraction of a
// getRandomValues call, and subscribers start a span per message.
const randomHex = (bytes: number): string => {
  let s = '';
  while (s.length < 2 * bytes) {
    const u = crypto.randomUUID();
    // its 30 random hex digits: all but the dashes, the version (index 14) and the variant (index 19)
    s += u.slice(0, 8) + u.slice(9, 13) + u.slice(15, 18) + u.slice(20, 23) + u.slice(24);
  }
  return s.slice(0, 2 * bytes);
};

export type StartSpanOptions = { kind: SpanKind; parent?: SpanContext | undefined; links?: Link[]; attributes?: Attributes; startTime?: number };

/**
 * Starts span `name` as a child of `parent` (a new trace without one). When the tracer records nothing (no SDK, or
 * not sampled), the span it returns is replaced by a non-recording one with a fresh span id in the parent's trace (or
 * a fresh trace), so logs and the outgoing headers still name this hop.
 */
export function startSpan(tracer: Tracer, name: string, options: StartSpanOptions): Span {
  const parent = options.parent;
  const ctx = parent ? trace.setSpanContext(ROOT_CONTEXT, parent) : ROOT_CONTEXT;
  const { kind, links, attributes, startTime } = options;
  const span = tracer.startSpan(name, { kind, ...(links ? { links } : {}), ...(attributes ? { attributes } : {}), ...(startTime ? { startTime } : {}) }, ctx);
  if (span.isRecording()) return span;
  const sc: SpanContext = { traceId: parent?.traceId ?? randomHex(16), spanId: randomHex(8), traceFlags: parent?.traceFlags ?? 0 };
  if (parent?.traceState) sc.traceState = parent.traceState;
  return trace.wrapSpanContext(sc);
}
