import { headers as natsHeaders, type MsgHdrs } from '@nats-io/nats-core';
import type { IntegrationEvent } from '../events/integration-event.ts';

/** A correlation id carried along: 1 to 128 printable ASCII characters. */
export const CORRELATION = /^[\x21-\x7e]{1,128}$/;

/** What travels besides the event's own headers: the producer span's trace context and the request's correlation id. */
export type ExtraHeaders = { traceparent?: unknown; tracestate?: unknown; correlationId?: unknown };

/**
 * The message headers of an event (docs/architecture.md, "JetStream settings"): the event's own, then `traceparent`,
 * `tracestate` for each string in `extra`, and `Correlation-Id` when it is a valid one (CORRELATION). Nats-Msg-Id is set by the publish call's `msgID`.
 */
export function eventHeaders(event: IntegrationEvent, extra: ExtraHeaders = {}): MsgHdrs {
  const h = natsHeaders();
  h.set('Event-Type', event.type);
  h.set('Aggregate-Type', event.aggregateType);
  h.set('Aggregate-Id', event.aggregateId);
  h.set('Aggregate-Version', String(event.aggregateVersion));
  h.set('Occurred-At', event.occurredAt);
  h.set('Content-Type', 'application/json');
  if (typeof extra.traceparent === 'string') h.set('traceparent', extra.traceparent);
  if (typeof extra.tracestate === 'string') h.set('tracestate', extra.tracestate);
  // a row may hold anything a script wrote: an id that is no header value is left out, never a reason to park the row
  if (typeof extra.correlationId === 'string' && CORRELATION.test(extra.correlationId)) h.set('Correlation-Id', extra.correlationId);
  return h;
}
