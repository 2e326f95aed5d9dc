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
  return asciiCanonicalFields(row) ?? decodedCanonicalFields(row);
}

/** The envelope's keys in appendToOutbox's order, as the bytes before each value (`{"eventId":`, `,"type":` …). */
const KEY_BYTES = ['{"eventId":', ',"type":', ',"aggregateType":', ',"aggregateId":', ',"aggregateVersion":', ',"occurredAt":', ',"data":'].map((k) =>
  Uint8Array.from(k, (c) => c.charCodeAt(0)),
);
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const DIGIT_0 = 0x30;
const DIGIT_9 = 0x39;

/** The position after `bytes` in `payload` at `at`, or -1 when they are not there. */
function after(payload: Uint8Array, at: number, bytes: Uint8Array): number {
  if (at < 0 || at + bytes.length > payload.length) return -1;
  for (let i = 0; i < bytes.length; i++) if (payload[at + i] !== bytes[i]) return -1;
  return at + bytes.length;
}

/**
 * The position after `text` written as a JSON string in `payload` at `at`, or -1 when it is not there or `text` holds
 * a character JSON escapes or that is no ASCII (such text is left to the decoded comparison).
 */
function afterJsonString(payload: Uint8Array, at: number, text: string): number {
  if (at < 0 || at + text.length + 2 > payload.length || payload[at] !== QUOTE) return -1;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x20 || c === QUOTE || c === BACKSLASH || c > 0x7e || payload[at + 1 + i] !== c) return -1;
  }
  return payload[at + 1 + text.length] === QUOTE ? at + text.length + 2 : -1;
}

/** The number the `count` ASCII digits at `at` write, or -1 when one is no digit. */
function digits(payload: Uint8Array, at: number, count: number): number {
  let n = 0;
  for (let i = at; i < at + count; i++) {
    const d = payload[i]! - DIGIT_0;
    if (d < 0 || d > 9) return -1;
    n = n * 10 + d;
  }
  return n;
}

/** The separators of `YYYY-MM-DDTHH:mm:ss.sssZ` (`-`, `T`, `:`, `.`, `Z`) by their offset; 0 where a digit stands. */
const TIME_FORM = Uint8Array.from('0000-00-00T00:00:00.000Z', (c) => (c >= '0' && c <= '9' ? 0 : c.charCodeAt(0)));

/**
 * The time written at `at` as `"YYYY-MM-DDTHH:mm:ss.sssZ"` when it is the instant `ms` (the time in the form
 * toISOString writes, so Date.parse reads it as `ms`), else undefined.
 */
function isoTimeAt(payload: Uint8Array, at: number, ms: number): string | undefined {
  if (at < 0 || at + 26 > payload.length || payload[at] !== QUOTE || payload[at + 25] !== QUOTE) return undefined;
  const t = at + 1;
  for (let i = 0; i < 24; i++) if (TIME_FORM[i] !== 0 && payload[t + i] !== TIME_FORM[i]) return undefined;
  const year = digits(payload, t, 4);
  const month = digits(payload, t + 5, 2);
  const day = digits(payload, t + 8, 2);
  const hour = digits(payload, t + 11, 2);
  const minute = digits(payload, t + 14, 2);
  const second = digits(payload, t + 17, 2);
  const milli = digits(payload, t + 20, 3);
  // Date.UTC reads years below 100 as 19xx; such times are left to the decoded comparison
  if (
    year < 100 ||
    month < 1 ||
    month > 12 ||
    day < 1 ||
    day > 31 ||
    hour < 0 ||
    hour > 23 ||
    minute < 0 ||
    minute > 59 ||
    second < 0 ||
    second > 59 ||
    milli < 0
  )
    return undefined;
  if (Date.UTC(year, month - 1, day, hour, minute, second, milli) !== ms) return undefined;
  // a day past the month's end (February 30th) rolls over into the next month, which the comparison above missed
  if (day > 28 && new Date(ms).getUTCDate() !== day) return undefined;
  return asciiText(payload, t);
}

/** The 24 ASCII bytes at `t` as text (one call with each byte as an argument: spreading the bytes costs 20 times as much). */
function asciiText(p: Uint8Array, t: number): string {
  // biome-ignore format: one byte per argument, in order
  return String.fromCharCode(p[t]!, p[t + 1]!, p[t + 2]!, p[t + 3]!, p[t + 4]!, p[t + 5]!, p[t + 6]!, p[t + 7]!, p[t + 8]!, p[t + 9]!, p[t + 10]!, p[t + 11]!, p[t + 12]!, p[t + 13]!, p[t + 14]!, p[t + 15]!, p[t + 16]!, p[t + 17]!, p[t + 18]!, p[t + 19]!, p[t + 20]!, p[t + 21]!, p[t + 22]!, p[t + 23]!);
}

/**
 * canonicalFields on the bytes, without decoding them or building the expected prefix: the common case of an envelope
 * whose ids and types are printable ASCII. Returns only what decodedCanonicalFields returns for the row; undefined
 * for anything else, which decodedCanonicalFields then decides.
 */
export function asciiCanonicalFields(row: StoredEvent): HeaderFields | undefined {
  const { payload } = row;
  if (
    row.occurred_at === null ||
    typeof row.id !== 'string' ||
    typeof row.message_type !== 'string' ||
    typeof row.aggregate_type !== 'string' ||
    typeof row.aggregate_id !== 'string'
  )
    return undefined;
  let at = afterJsonString(payload, after(payload, 0, KEY_BYTES[0]!), row.id);
  at = afterJsonString(payload, after(payload, at, KEY_BYTES[1]!), row.message_type);
  at = afterJsonString(payload, after(payload, at, KEY_BYTES[2]!), row.aggregate_type);
  at = afterJsonString(payload, after(payload, at, KEY_BYTES[3]!), row.aggregate_id);
  at = after(payload, at, KEY_BYTES[4]!);
  if (at < 0 || payload[at] === DIGIT_0) return undefined;
  const first = at;
  let aggregateVersion = 0;
  while (at - first < 16 && at < payload.length && payload[at]! >= DIGIT_0 && payload[at]! <= DIGIT_9)
    aggregateVersion = aggregateVersion * 10 + (payload[at++]! - DIGIT_0);
  if (at === first) return undefined;
  at = after(payload, at, KEY_BYTES[5]!);
  const occurredAt = isoTimeAt(payload, at, row.occurred_at);
  if (occurredAt === undefined) return undefined;
  at = after(payload, at + 26, KEY_BYTES[6]!);
  // the decoded comparison reads only the first HEAD_BYTES
  if (at < 0 || at > HEAD_BYTES) return undefined;
  // each digit is added once it is a number: a byte added first would round the sum just below 2^53; past 2^53 the
  // digits no longer add up exactly, and such a number is refused either way
  if (!Number.isSafeInteger(aggregateVersion) || !SUBJECT_TOKEN.test(row.aggregate_id)) return undefined;
  return { type: row.message_type, aggregateType: row.aggregate_type, aggregateId: row.aggregate_id, aggregateVersion, occurredAt };
}

/** canonicalFields on the payload's decoded head: any envelope in appendToOutbox's form, non-ASCII text included. */
export function decodedCanonicalFields(row: StoredEvent): HeaderFields | undefined {
  const { payload } = row;
  const prefix = `{"eventId":${JSON.stringify(row.id)},"type":${JSON.stringify(row.message_type)},"aggregateType":${JSON.stringify(row.aggregate_type)},"aggregateId":${JSON.stringify(row.aggregate_id)},"aggregateVersion":`;
  // decoding a few hundred bytes costs less than encoding the expected prefix to compare bytes
  const head = decoder.decode(payload.length > HEAD_BYTES ? payload.subarray(0, HEAD_BYTES) : payload);
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
