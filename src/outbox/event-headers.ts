import type { MsgHdrs } from '@nats-io/nats-core';
import { MsgHdrsImpl } from '@nats-io/nats-core/internal';
import type { IntegrationEvent } from '../events/integration-event.ts';

/** A correlation id carried along: 1 to 128 printable ASCII characters. */
export const CORRELATION = /^[\x21-\x7e]{1,128}$/;

/** What travels besides the event's own headers: the producer span's trace context and the request's correlation id. */
export type ExtraHeaders = { traceparent?: unknown; tracestate?: unknown; correlationId?: unknown; msgId?: string };

/** The fields of an event its headers carry (the relay reads them off a row without parsing the whole payload). */
export type HeaderFields = Pick<IntegrationEvent, 'type' | 'aggregateType' | 'aggregateId' | 'aggregateVersion' | 'occurredAt'>;

/** A value that would end its header line early: the header is left out rather than sent broken. */
const LINE_BREAK = /[\r\n]/;
/** Whitespace the broker would trim off a header value. */
const EDGE_SPACE = /^\s|\s$/;

/**
 * The message headers of an event (docs/architecture.md, "JetStream settings"): `Nats-Msg-Id` first when `extra.msgId`
 * is given (a msgId holding a line break, or starting or ending with whitespace, throws: a message must never lose its
 * deduplication id, nor share another's), the event's own, then `traceparent`, `tracestate` for each string in `extra`,
 * and `Correlation-Id` when it is a valid one (CORRELATION). The event's fields were validated when it was stored
 * (types, subject-safe tokens, an ISO time), so the header block is built directly instead of through `MsgHdrs.set`,
 * whose per-call key and value checks were a tenth of the relay's CPU; only the optional extras, which come from
 * stored rows, are checked here.
 */
export function eventHeaders(event: HeaderFields, extra: ExtraHeaders = {}): MsgHdrs {
  const record: Record<string, string[]> = {};
  if (extra.msgId !== undefined) {
    if (LINE_BREAK.test(extra.msgId)) throw new Error('an event id holding a line break cannot be a Nats-Msg-Id');
    // the broker trims a header value: " e1" would be deduplicated against "e1", and the row marked sent unpublished
    if (EDGE_SPACE.test(extra.msgId)) throw new Error('an event id with leading or trailing whitespace cannot be a Nats-Msg-Id');
    // first: nats-server finds a header by the first occurrence of its name anywhere in the block and ignores it unless
    // that occurrence starts a line, so a value before it holding the text "Nats-Msg-Id" would switch deduplication off
    record['Nats-Msg-Id'] = [extra.msgId];
  }
  record['Event-Type'] = [event.type];
  record['Aggregate-Type'] = [event.aggregateType];
  record['Aggregate-Id'] = [event.aggregateId];
  record['Aggregate-Version'] = [String(event.aggregateVersion)];
  record['Occurred-At'] = [event.occurredAt];
  record['Content-Type'] = ['application/json'];
  if (typeof extra.traceparent === 'string' && !LINE_BREAK.test(extra.traceparent)) record.traceparent = [extra.traceparent];
  if (typeof extra.tracestate === 'string' && !LINE_BREAK.test(extra.tracestate)) record.tracestate = [extra.tracestate];
  // a row may hold anything a script wrote: an id that is no header value is left out, never a reason to park the row
  if (typeof extra.correlationId === 'string' && CORRELATION.test(extra.correlationId)) record['Correlation-Id'] = [extra.correlationId];
  return MsgHdrsImpl.fromRecord(record);
}
