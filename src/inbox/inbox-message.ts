import type { JsMsg } from '@nats-io/jetstream';
import type { IntegrationEvent } from '../events/integration-event.ts';
import { InvalidEventError, UnknownEventTypeError, type EventRegistry } from '../events/registry.ts';

/** A delivered message as the inbox sees it: broker-independent, so a dead letter can be replayed from its copy. */
export type InboxMessage = {
  /** The subject it was published on (dead letters keep it as it was). */
  subject: string;
  /**
   * Its aggregate, `<aggregate_type>.<aggregate_id>` (see aggregateKeyOf): what per-aggregate order is kept by, as
   * one aggregate's subjects differ across partition counts. Derived from the headers or the subject when absent.
   */
  aggregate?: string;
  headers: Record<string, string>;
  /** The body as text (the integration event JSON). */
  payload: string;
  /** The attempt: 1 on first delivery; JetStream's delivery count plus the runner's in-process retries after that. */
  deliveryCount: number;
  /** Key for the dead letter when the body carries no usable `eventId` (e.g. it is not JSON). */
  fallbackId: string;
};

const decoder = new TextDecoder();

/**
 * The aggregate of a message, `<aggregate_type>.<aggregate_id>`: from its Aggregate-Type and Aggregate-Id headers when
 * both are there, else the two subject tokens after `prefix` (the stream's subject prefix, which may hold dots), else
 * the subject itself. One aggregate has one key whatever its partition token (or none, before partitions existed).
 */
export function aggregateKeyOf(subject: string, headers: Record<string, string>, prefix?: string): string {
  const type = headers['Aggregate-Type'];
  const id = headers['Aggregate-Id'];
  if (type && id) return `${type}.${id}`;
  if (prefix === undefined || !subject.startsWith(`${prefix}.`)) return subject;
  const [t, i] = subject.slice(prefix.length + 1).split('.');
  return t && i ? `${t}.${i}` : subject;
}

/** The aggregate key of `msg`: its `aggregate` when set, else derived from its headers and subject (aggregateKeyOf). */
export const aggregateOf = (msg: InboxMessage): string => msg.aggregate ?? aggregateKeyOf(msg.subject, msg.headers);

/**
 * Copies what the inbox needs out of a JetStream message, with its aggregate key (`prefix`: the stream's subject
 * prefix, for messages without aggregate headers); the fallback id is Nats-Msg-Id, else the stream sequence.
 */
export function toInboxMessage(msg: JsMsg, prefix?: string): InboxMessage {
  const headers: Record<string, string> = {};
  if (msg.headers) for (const [k, v] of msg.headers) headers[k] = v[0] ?? '';
  return {
    subject: msg.subject,
    aggregate: aggregateKeyOf(msg.subject, headers, prefix),
    headers,
    payload: decoder.decode(msg.data),
    deliveryCount: msg.info.deliveryCount,
    fallbackId: headers['Nats-Msg-Id'] || `${msg.info.stream}:${msg.info.streamSequence}`,
  };
}

export type DecodedMessage =
  | { ok: true; event: IntegrationEvent }
  /** A permanent problem of the message itself: retrying cannot help. */
  | { ok: false; eventId: string; error: string };

/**
 * Parses the body and validates it against the registry (the whitelist): unparsable JSON, an unregistered type
 * or a payload failing its schema come back as `ok: false` with the reason. Pure; no database.
 */
export function decodeMessage(registry: EventRegistry, msg: InboxMessage): DecodedMessage {
  let raw: unknown;
  try {
    raw = JSON.parse(msg.payload);
  } catch (error) {
    return { ok: false, eventId: msg.fallbackId, error: `payload is not JSON: ${(error as Error).message}` };
  }
  try {
    return { ok: true, event: registry.parse(raw) };
  } catch (error) {
    if (!(error instanceof UnknownEventTypeError) && !(error instanceof InvalidEventError)) throw error;
    const id = (raw as { eventId?: unknown } | null)?.eventId;
    const eventId = typeof id === 'string' && id.length > 0 && id.length <= 128 ? id : msg.fallbackId;
    return { ok: false, eventId, error: error.message };
  }
}
