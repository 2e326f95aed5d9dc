import { sqlOf, type Tx } from '../db/open-database.ts';
import type { IntegrationEvent } from '../events/integration-event.ts';
import type { EventRegistry } from '../events/registry.ts';
import { aggregateHash } from './partition.ts';

/** Metadata carried to the broker as message headers (W3C trace context, correlation id). */
export type OutboxHeaders = { traceparent?: string; tracestate?: string; correlationId?: string };

/** The event holds text the database would not store as sent (a NUL, an unpaired surrogate); it was not stored. */
export class UnstorableTextError extends Error {
  override readonly name = 'UnstorableTextError';
  constructor(
    readonly type: string,
    readonly path: string,
  ) {
    super(`Refusing to store ${type}: the text at ${path} contains a NUL character or an unpaired surrogate, which the database would not store as sent`);
  }
}

/**
 * Stores integration events as `pending` outbox rows, each in its aggregate's partition. Must be called inside the command's write transaction
 * (`tx`): it never commits, so the rows become visible together with the state change or not at all.
 * Throws (and so aborts the transaction) for an unregistered type, a payload failing its schema, an
 * aggregate type/id that is not a subject-safe token, or text anywhere in the event or headers that would not
 * read back as published (UnstorableTextError).
 */
export async function appendToOutbox(tx: Tx, events: IntegrationEvent[], ctx: { registry: EventRegistry; now: Date; headers?: OutboxHeaders }): Promise<void> {
  if (events.length === 0) return;
  const nowMs = ctx.now.getTime();
  const headers = JSON.stringify(ctx.headers ?? {});
  const headersStorable = !ctx.headers || storableJson(headers);
  const args: Array<string | number> = [];
  for (const raw of events) {
    const event = ctx.registry.parse(raw);
    const hash = aggregateHash(event.aggregateType, event.aggregateId);
    const payload = JSON.stringify(event);
    // the JSON text says whether a walk is needed; the walk names where the text is
    if (!storableJson(payload)) assertStorable(event.type, event, 'event');
    if (!headersStorable) assertStorable(event.type, ctx.headers, 'headers');
    args.push(event.eventId, event.aggregateType, event.aggregateId, event.type, payload, headers, Date.parse(event.occurredAt), nowMs, hash, hash);
  }
  await sqlOf(tx).execute({ sql: insertSql(events.length), args });
}

// the partition is taken from the count in the same transaction, so a row never lands outside the partitions;
// payload_validated = 1: the payload is the registry-parsed event as JSON.stringify wrote it, which lets the relay
// check only its envelope prefix (row-message.ts)
const ROW = "(?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?, ? % (SELECT count FROM outbox_partitions WHERE id = 1), 1)";
// one text per row count, built once (most commands append one or two events)
const INSERT_SQL: string[] = [];
const insertSql = (n: number): string =>
  (INSERT_SQL[n] ??=
    `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, headers, status, attempts, occurred_at, available_at, aggregate_hash, partition, payload_validated) VALUES ${Array.from({ length: n }, () => ROW).join(', ')}`);

/** NUL cuts text short when libSQL reads it back; an unpaired surrogate comes back as U+FFFD. */
const UNSTORABLE = /[\0\p{Cs}]/u;

/**
 * JSON.stringify writes a NUL as `\u0000` and an unpaired surrogate as `\udXXX` (d800–dfff), the only escapes of
 * that form it writes, and a backslash of the text as `\\`: such an escape preceded by an even number of
 * backslashes (the escape's own backslash then being odd) is one of the characters UNSTORABLE finds in strings.
 */
const UNSTORABLE_JSON = /(?<!\\)(?:\\\\)*\\u(?:0000|d[89a-f][0-9a-f]{2})/;

/** True when JSON text `json` (from JSON.stringify) has no string or key holding a NUL or an unpaired surrogate. */
export function storableJson(json: string): boolean {
  // most texts have no `\u` escape at all: a plain search answers them
  return !json.includes('\\u') || !UNSTORABLE_JSON.test(json);
}

/**
 * Throws UnstorableTextError for the first string (key or value) under `value` that would not read back as it is:
 * the row's own columns (id, aggregate, type) hold it raw, and subscribers store what they receive.
 */
function assertStorable(type: string, value: unknown, path: string): void {
  if (typeof value === 'string') {
    if (UNSTORABLE.test(value)) throw new UnstorableTextError(type, path);
  } else if (Array.isArray(value)) {
    value.forEach((v, i) => assertStorable(type, v, `${path}.${i}`));
  } else if (typeof value === 'object' && value !== null) {
    for (const [k, v] of Object.entries(value)) {
      if (UNSTORABLE.test(k)) throw new UnstorableTextError(type, `${path} (a key)`);
      assertStorable(type, v, `${path}.${k}`);
    }
  }
}
