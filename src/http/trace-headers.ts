import type { Context } from 'hono';
import type { OutboxHeaders } from '../outbox/append-to-outbox.ts';

/** A W3C trace context `traceparent` header value. */
export const TRACEPARENT = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;
/** A correlation id carried along: 1 to 128 printable ASCII characters. */
export const CORRELATION = /^[\x21-\x7e]{1,128}$/;

/** Picks a valid W3C `traceparent` and a correlation id from the request, to travel with the outbox rows. */
export function outboxHeadersFrom(c: Context): OutboxHeaders {
  const headers: OutboxHeaders = {};
  const tp = c.req.header('traceparent');
  if (tp && TRACEPARENT.test(tp)) headers.traceparent = tp;
  const cid = c.req.header('X-Correlation-Id') ?? c.req.header('X-Request-Id');
  if (cid && CORRELATION.test(cid)) headers.correlationId = cid;
  return headers;
}
