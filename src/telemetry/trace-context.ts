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

// Random bytes drawn in bulk: one getRandomValues call per POOL_BYTES, since a call costs as much as a few
// hundred bytes' worth of hex (≈ 15 µs a call on a small machine), and every request starts a span.
const POOL_BYTES = 4096;
const pool = new Uint8Array(POOL_BYTES);
let poolAt = POOL_BYTES;
const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0'));

/** `bytes` random bytes (CSPRNG) as lower-case hex, never all zeros (an invalid trace or span id). */
const randomHex = (bytes: number): string => {
  for (;;) {
    if (poolAt + bytes > POOL_BYTES) {
      crypto.getRandomValues(pool);
      poolAt = 0;
    }
    let s = '';
    let any = 0;
    for (let i = 0; i < bytes; i++) {
      const b = pool[poolAt++]!;
      any |= b;
      s += HEX[b];
    }
    if (any !== 0) return s;
  }
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
