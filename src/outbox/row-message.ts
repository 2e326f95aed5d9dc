import type { EventRegistry } from '../events/registry.ts';
import type { HeaderFields } from './event-headers.ts';

/**
 * A stored row as the relay reads it: its columns, the payload as the bytes stored (UTF-8 JSON), and `payload_validated`
 * (1: appendToOutbox validated and wrote the payload and nothing changed it since; 0 or absent: anything else).
 */
export type StoredEvent = {
  id: string;
  aggregate_type: string;
  aggregate_id: string;
  message_type: string;
  /** The occurrence time in ms, null when the column holds none (a script's row): such a row is checked in full. */
  occurred_at: number | null;
  payload: Uint8Array;
  payload_validated?: number;
};

const decoder = new TextDecoder();
/**
 * For the full check: bytes that are no UTF-8, or that start with a byte order mark, fail (and the row is refused),
 * since the relay publishes the stored bytes and a reader must decode them into the event that was checked.
 */
const strictDecoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
/** Enough of a payload to hold its envelope up to `"data":`: four JSON strings of at most 128 characters, and the rest. */
const HEAD_BYTES = 2048;
/** What follows the aggregate version in the canonical form: the occurrence time (ms precision, UTC) and `"data":`. */
const VERSION_AND_TIME = /([1-9][0-9]{0,15}),"occurredAt":"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z)","data":/y;
const CLOSING_BRACE = 0x7d;
/** SubjectToken's pattern, for rows whose columns were not written by appendToOutbox. */
const SUBJECT_TOKEN = /^[^.*>\s\p{Cc}\p{Cs}]{1,128}$/u;

/**
 * The header fields read off the envelope prefix of a payload in the form appendToOutbox writes (the event serialized
 * with its envelope first in a fixed order) that agrees with the row's columns; undefined when it is not in that form.
 * The prefix says nothing of what follows `"data":` (a later duplicate key, data failing its schema): it stands for the
 * whole event only on a row marked payload_validated, whose payload appendToOutbox validated and wrote itself.
 */
export function canonicalFields(row: StoredEvent): HeaderFields | undefined {
  const { payload } = row;
  if (payload.length < 2 || payload[payload.length - 1] !== CLOSING_BRACE) return undefined;
  // decoding a few hundred bytes costs less than encoding the expected prefix to compare bytes
  const head = decoder.decode(payload.length > HEAD_BYTES ? payload.subarray(0, HEAD_BYTES) : payload);
  const prefix = `{"eventId":${JSON.stringify(row.id)},"type":${JSON.stringify(row.message_type)},"aggregateType":${JSON.stringify(row.aggregate_type)},"aggregateId":${JSON.stringify(row.aggregate_id)},"aggregateVersion":`;
  if (!head.startsWith(prefix)) return undefined;
  VERSION_AND_TIME.lastIndex = prefix.length;
  const m = VERSION_AND_TIME.exec(head);
  if (!m) return undefined;
  const aggregateVersion = Number(m[1]);
  const occurredAt = m[2]!;
  if (!Number.isSafeInteger(aggregateVersion) || !SUBJECT_TOKEN.test(row.aggregate_id)) return undefined;
  // the column is the payload's time in ms (appendToOutbox stores both); a disagreement means the row was edited
  if (Date.parse(occurredAt) !== row.occurred_at) return undefined;
  return { type: row.message_type, aggregateType: row.aggregate_type, aggregateId: row.aggregate_id, aggregateVersion, occurredAt };
}

/**
 * The header fields of a row, or the permanent error that keeps it from being published: its type must be registered
 * for its aggregate type; a row marked payload_validated whose payload is in appendToOutbox's form is checked against
 * its columns only (canonicalFields), any other must parse, pass the registry's schemas and agree with the columns.
 */
export function headerFieldsOf(row: StoredEvent, registry: EventRegistry): HeaderFields {
  // throws UnknownEventTypeError for an unregistered type, as the full check would
  const aggregate = registry.aggregateOf(row.message_type);
  const envelope = aggregate === row.aggregate_type ? canonicalFields(row) : undefined;
  // the mark is set only by appendToOutbox and cleared by a trigger on any change to the payload or a compared column
  if (envelope && row.payload_validated) return envelope;
  const event = registry.parse(JSON.parse(strictDecoder.decode(row.payload)));
  if (event.type !== row.message_type || event.aggregateType !== row.aggregate_type || event.aggregateId !== row.aggregate_id || event.eventId !== row.id) {
    throw new Error('outbox row columns do not match its payload');
  }
  // a canonical-looking envelope that parses to another version or time holds that key twice: the parsed event
  // (what subscribers read) would not be the envelope a reader of the prefix sees
  if (envelope && (event.aggregateVersion !== envelope.aggregateVersion || event.occurredAt !== envelope.occurredAt)) {
    throw new Error('outbox row payload repeats an envelope key with another value');
  }
  return event;
}

/** `value` as JSON with the keys of every object in sorted order: equal for equal values, whatever their key order. */
function sortedJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(sortedJson).join(',')}]`;
  // a value a schema made of the JSON (a Date) is compared as the JSON it writes
  if (typeof value === 'object' && value !== null && typeof (value as { toJSON?: unknown }).toJSON === 'function') return JSON.stringify(value);
  if (typeof value === 'object' && value !== null) {
    const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
    entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${sortedJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/**
 * Whether a message the stream holds (`stored`) is the event a row's payload holds (`own`): the same bytes, or both
 * parsed and validated by the registry to the same event, whatever the key order or spacing. A producer that published
 * the event itself before its outbox row (docs/migrating.md) wrote its own JSON of it. Bytes that do not parse into a
 * registered event are another message.
 */
export function sameEvent(stored: Uint8Array, own: Uint8Array, registry: EventRegistry): boolean {
  if (stored.length === own.length && stored.every((b, i) => b === own[i])) return true;
  try {
    const a = registry.parse(JSON.parse(strictDecoder.decode(stored)));
    const b = registry.parse(JSON.parse(strictDecoder.decode(own)));
    return sortedJson(a) === sortedJson(b);
  } catch {
    return false;
  }
}
