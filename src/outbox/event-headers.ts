import { headers as natsHeaders, type MsgHdrs } from '@nats-io/nats-core';
import type { IntegrationEvent } from '../events/integration-event.ts';

/** The message headers of an event (docs/architecture.md, "JetStream settings"); Nats-Msg-Id is set by the publish call's `msgID`. */
export function eventHeaders(event: IntegrationEvent, extra: { traceparent?: unknown; correlationId?: unknown } = {}): MsgHdrs {
  const h = natsHeaders();
  h.set('Event-Type', event.type);
  h.set('Aggregate-Type', event.aggregateType);
  h.set('Aggregate-Id', event.aggregateId);
  h.set('Aggregate-Version', String(event.aggregateVersion));
  h.set('Occurred-At', event.occurredAt);
  h.set('Content-Type', 'application/json');
  if (typeof extra.traceparent === 'string') h.set('traceparent', extra.traceparent);
  if (typeof extra.correlationId === 'string') h.set('Correlation-Id', extra.correlationId);
  return h;
}
