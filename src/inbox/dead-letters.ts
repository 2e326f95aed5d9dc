import type { Row } from '@libsql/client';
import { sqlOf, type Database } from '../db/open-database.ts';
import type { Writer } from '../db/writer.ts';
import { sleep } from '../worker/sleep.ts';
import { applyOnce, describeError, type InboxDeps } from './handle-once.ts';
import { decodeMessage, type InboxMessage } from './inbox-message.ts';
import { deleteDeadLetter, recordReplayError } from './inbox-store.ts';
import { bytesFromHex, hexOf, hexUnlessPlain, integerOrNull, storedText, textOf, textOrBytes, timeMsOrNull } from '../db/column-guards.ts';

/** A message a subscriber gave up on, with the stored copy replay works from. */
export type DeadLetter = {
  eventId: string;
  consumer: string;
  subject: string;
  /** The event type: the body's `type` when it is a JSON object with one, else the Event-Type header, else null. */
  type: string | null;
  headers: Record<string, string>;
  payload: string;
  error: string;
  /** null when the column holds no count (a row a script wrote). */
  deliveries: number | null;
  /** The time of death in epoch ms; null when the column holds no time (a row a script wrote). */
  deadAt: number | null;
  /** The dead_at column's value as stored, which pages are ordered and resumed by. */
  key: DeadAtKey;
  /** The event_id column's value as stored, which pages are ordered and resumed by after `key`. */
  idKey: EventIdKey;
};

/** Text a script stored that is no valid UTF-8, as its bytes in the database's encoding. */
export type StoredTextBytes = { textBytes: Uint8Array };

/**
 * A dead_at value as stored, bound back as it is so a page resumes exactly after it: a number (what the subscriber
 * writes), or — for a row a script wrote — an integer past 2^53, a text (as its bytes when it is no UTF-8) or a blob.
 */
export type DeadAtKey = number | bigint | string | Uint8Array | StoredTextBytes;

/** An event_id as stored: the text, or (a script's row) a blob or the bytes of text that is no valid UTF-8. */
export type EventIdKey = string | Uint8Array | StoredTextBytes;

/** Where a page of dead letters starts: after this one (they are ordered by time of death, then event id). */
export type DeadLetterCursor = { deadAt: DeadAtKey; eventId: EventIdKey };

/** Which dead letters of a consumer to list: `limit` of them after `after` (from the oldest without it), filtered. */
export type DeadLetterQuery = {
  limit: number;
  after?: DeadLetterCursor | undefined;
  /** Only this event type. */
  type?: string | undefined;
  /** Only those whose error contains this text (any case). */
  q?: string | undefined;
};

/** One page, oldest first, and the cursor of the next page (undefined on the last one). */
export type DeadLetterPage = { items: DeadLetter[]; next: DeadLetterCursor | undefined };

/** Headers that are a JSON object of text: what the subscriber stores; anything else a script wrote. */
const HEADERS_OK = `typeof(headers) = 'text' AND json_valid(headers) AND json_type(headers) = 'object'`;

/**
 * The event type of a dead letter: the body's `type` when it is a JSON object with a text one, else the Event-Type
 * header (when the headers are a JSON object: a script's text or blob there must not fail the statement).
 */
const TYPE_OF = `CASE WHEN json_valid(payload) AND json_type(payload, '$.type') = 'text' THEN payload ->> '$.type' WHEN ${HEADERS_OK} THEN headers ->> '$."Event-Type"' END`;

/**
 * Columns a script may fill with anything are read through guards, so one odd row is listed and replayed rather
 * than failing the page (the driver refuses an integer past 2^53 as a number): the headers as `{}` unless a JSON
 * object, deliveries and the time of death as NULL unless a count and a time, and dead_at once more as it is stored
 * (`dead_at_type`, `dead_at_raw`: an integer as its decimal text, a blob or text other than printable ASCII in hex)
 * for the page's cursor, and event_id once more in hex when it is such text or a blob (`event_id_hex`). Text is read
 * through textOrBytes, since the driver aborts the process on text that is no UTF-8: such bytes show as U+FFFD, and the
 * cursor carries the stored bytes, so the next page resumes exactly after them.
 */
const COLUMNS = `${textOrBytes('event_id')} AS event_id, ${textOrBytes('consumer')} AS consumer, ${textOrBytes('subject')} AS subject,
  ${textOrBytes(`CASE WHEN ${HEADERS_OK} THEN headers ELSE '{}' END`)} AS headers, ${textOrBytes('payload')} AS payload, ${textOrBytes('error')} AS error,
  ${integerOrNull('deliveries', 0)} AS deliveries, ${timeMsOrNull('dead_at')} AS dead_at_ms, typeof(dead_at) AS dead_at_type,
  CASE typeof(dead_at) WHEN 'integer' THEN CAST(dead_at AS TEXT) WHEN 'blob' THEN hex(dead_at) ELSE ${textOrBytes('dead_at')} END AS dead_at_raw,
  ${hexUnlessPlain('dead_at')} AS dead_at_hex,
  typeof(event_id) AS event_id_type, ${hexUnlessPlain('event_id')} AS event_id_hex,
  ${textOrBytes(`(${TYPE_OF})`)} AS type`;

/**
 * A key is bound as a parameter, except ±Infinity (a REAL a script may store), which the driver refuses to bind:
 * `:afterInf` 1 or -1 stands for it in SQL. A first page starts after -Infinity (-1 with an empty event id), below
 * every number SQLite stores (text and blobs sort above numbers), so it misses none.
 */
const AFTER_KEY = `CASE :afterInf WHEN 1 THEN 9e999 WHEN -1 THEN -9e999 WHEN 2 THEN CAST(unhex(:afterAt) AS TEXT) ELSE :afterAt END`;

/** The event id a page starts after: bound as it is, or (`:afterIdText` 1) text given by its stored bytes in hex. */
const AFTER_ID = `CASE :afterIdText WHEN 1 THEN CAST(unhex(:afterId) AS TEXT) ELSE :afterId END`;

/**
 * A page of one consumer's dead letters: a keyset range of idx_dead_letters_consumer_dead_at (never OFFSET, so
 * every page costs the same and rows deleted or added between pages shift nothing); see AFTER_KEY for where a page
 * starts. Filters are checked on the rows the range walks. ORDER BY names the table's columns: a bare name would
 * mean COLUMNS' guarded expression of that name, which no index holds.
 */
export const DEAD_LETTER_PAGE_SQL = `
  SELECT ${COLUMNS} FROM dead_letters
  WHERE consumer = :consumer AND (dead_at, event_id) > (${AFTER_KEY}, ${AFTER_ID})
    AND (:type IS NULL OR ${TYPE_OF} = :type)
    AND (:q IS NULL OR instr(lower(error), lower(:q)) > 0)
  ORDER BY dead_letters.dead_at, dead_letters.event_id
  LIMIT :limit`;

/** Whether a key is text given by its stored bytes. */
export const isTextBytes = (key: unknown): key is StoredTextBytes => typeof key === 'object' && key !== null && 'textBytes' in key;

/** dead_at as stored (see COLUMNS): what a cursor binds to resume after this row. */
function keyOf(type: unknown, raw: unknown, hex: unknown): DeadAtKey {
  if (type === 'integer') {
    const n = BigInt(String(raw));
    return n >= -BigInt(Number.MAX_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n;
  }
  if (type === 'blob') return bytesFromHex(String(raw));
  if (type === 'real') return Number(raw);
  return textKeyOf(raw, hex);
}

/** A text column read through textOrBytes, as stored: its text, or its stored bytes (hex) when it holds no valid text. */
const textKeyOf = (raw: unknown, hex: unknown): string | StoredTextBytes => storedText(raw) ?? { textBytes: bytesFromHex(String(hex)) };

/** event_id as stored (see COLUMNS): the text, a blob's bytes, or the bytes of text that is no valid UTF-8. */
function idKeyOf(type: unknown, raw: unknown, hex: unknown): EventIdKey {
  return type === 'blob' ? bytesFromHex(String(hex)) : textKeyOf(raw, hex);
}

function toDeadLetter(r: Row): DeadLetter {
  return {
    eventId: textOf(r.event_id),
    consumer: textOf(r.consumer),
    subject: textOf(r.subject),
    type: r.type === null ? null : textOf(r.type),
    headers: JSON.parse(textOf(r.headers)) as Record<string, string>,
    payload: textOf(r.payload),
    error: textOf(r.error),
    deliveries: r.deliveries === null ? null : Number(r.deliveries),
    deadAt: r.dead_at_ms === null ? null : Number(r.dead_at_ms),
    key: keyOf(r.dead_at_type, r.dead_at_raw, r.dead_at_hex),
    idKey: idKeyOf(r.event_id_type, r.event_id, r.event_id_hex),
  };
}

/** Reads one page of `consumer`'s dead letters (see DEAD_LETTER_PAGE_SQL). */
export async function pageDeadLetters(db: Database, consumer: string, query: DeadLetterQuery): Promise<DeadLetterPage> {
  const after = query.after?.deadAt;
  const afterId = query.after?.eventId;
  const rs = await db.$client.execute({
    sql: DEAD_LETTER_PAGE_SQL,
    args: {
      consumer,
      afterInf: after === undefined || after === Number.NEGATIVE_INFINITY ? -1 : after === Number.POSITIVE_INFINITY ? 1 : isTextBytes(after) ? 2 : 0,
      afterAt: after === undefined || (typeof after === 'number' && !Number.isFinite(after)) ? 0 : isTextBytes(after) ? hexOf(after.textBytes) : after,
      afterIdText: isTextBytes(afterId) ? 1 : 0,
      afterId: afterId === undefined ? '' : isTextBytes(afterId) ? hexOf(afterId.textBytes) : afterId,
      type: query.type ?? null,
      q: query.q ?? null,
      // one more than asked: whether it comes back says whether there is a next page
      limit: query.limit + 1,
    },
  });
  const items = rs.rows.slice(0, query.limit).map(toDeadLetter);
  const last = items.at(-1);
  return { items, next: rs.rows.length > query.limit && last ? { deadAt: last.key, eventId: last.idKey } : undefined };
}

/** Every dead letter of `consumer`, page by page, oldest first. */
export async function* eachDeadLetter(db: Database, consumer: string, pageSize = 100): AsyncGenerator<DeadLetter> {
  let after: DeadLetterCursor | undefined;
  do {
    const page = await pageDeadLetters(db, consumer, { limit: pageSize, after });
    yield* page.items;
    after = page.next;
  } while (after);
}

/** The dead letters of `consumer`, oldest first. */
export async function listDeadLetters(db: Database, consumer: string): Promise<DeadLetter[]> {
  const all: DeadLetter[] = [];
  for await (const dead of eachDeadLetter(db, consumer)) all.push(dead);
  return all;
}

/** The dead letter of `eventId` for `consumer`, or undefined. */
export async function findDeadLetter(db: Database, consumer: string, eventId: string): Promise<DeadLetter | undefined> {
  const rs = await db.$client.execute({ sql: `SELECT ${COLUMNS} FROM dead_letters WHERE event_id = ? AND consumer = ?`, args: [eventId, consumer] });
  return rs.rows[0] && toDeadLetter(rs.rows[0]);
}

/** How many dead letters `consumer` has (a count over its range of idx_dead_letters_consumer_dead_at). */
export async function countDeadLetters(db: Database, consumer: string): Promise<number> {
  const rs = await db.$client.execute({ sql: 'SELECT count(*) AS n FROM dead_letters WHERE consumer = ?', args: [consumer] });
  return Number(rs.rows[0]!.n);
}

/** Dead letters deleted per write transaction when deleting all of them. */
const DELETE_BATCH = 1000;

/**
 * Deletes `consumer`'s dead letter `eventId`, or all of them when it is undefined, through `writer` (the subscriber
 * database's write queue), `DELETE_BATCH` per transaction; `onDeleted` hears the ids of each committed batch. The
 * events are not applied: deleting a dead letter is an operator's decision to drop it. Returns how many were deleted.
 */
export async function deleteDeadLetters(
  writer: Writer,
  consumer: string,
  eventId: string | undefined,
  onDeleted: (eventIds: string[]) => void = () => {},
): Promise<number> {
  let deleted = 0;
  for (;;) {
    const ids = await writer.write(async (tx) => {
      const rs = await sqlOf(tx).execute(
        eventId === undefined
          ? {
              sql: `DELETE FROM dead_letters WHERE rowid IN (SELECT rowid FROM dead_letters WHERE consumer = ? LIMIT ?) RETURNING ${textOrBytes('event_id')} AS event_id`,
              args: [consumer, DELETE_BATCH],
            }
          : { sql: `DELETE FROM dead_letters WHERE consumer = ? AND event_id = ? RETURNING ${textOrBytes('event_id')} AS event_id`, args: [consumer, eventId] },
      );
      return rs.rows.map((r) => textOf(r.event_id));
    });
    deleted += ids.length;
    if (ids.length > 0) onDeleted(ids);
    if (eventId !== undefined || ids.length < DELETE_BATCH) return deleted;
    await sleep(0);
  }
}

export type ReplayDeps = InboxDeps & { db: Database };

export type ReplayReport = {
  /** Applied now; their dead letters are gone. */
  replayed: string[];
  /** Already in the inbox (applied by an earlier delivery); their dead letters are gone. */
  duplicates: string[];
  /** Still failing; the dead letter stays with the new error. */
  failed: Array<{ eventId: string; error: string }>;
  /** Asked for by id but not a dead letter of this consumer. */
  notFound: string[];
};

/**
 * Re-applies dead letters of `deps.consumer` (one by id, or all, oldest first) from their stored copies, through
 * the same inbox path as a delivery and the subscriber's write queue: the inbox row, the effect and the removal of
 * the dead letter commit together, so a replay that fails leaves the dead letter (with its new error) and no
 * partial effect, and one that runs twice applies the event once.
 */
export async function replayDeadLetters(deps: ReplayDeps, which: string | 'all'): Promise<ReplayReport> {
  if (which !== 'all') return replayDeadLetter(deps, which);
  const report = emptyReport();
  // page by page: a replayed letter is deleted and a failed one keeps its place, so the cursor skips neither
  for await (const dead of eachDeadLetter(deps.db, deps.consumer)) await replayOne(deps, dead, report);
  return report;
}

/** Replays the dead letter `eventId` of `deps.consumer` as replayDeadLetters does (whatever the id, even `all`). */
export async function replayDeadLetter(deps: ReplayDeps, eventId: string): Promise<ReplayReport> {
  const report = emptyReport();
  const dead = await findDeadLetter(deps.db, deps.consumer, eventId);
  if (dead) await replayOne(deps, dead, report);
  else report.notFound.push(eventId);
  return report;
}

const emptyReport = (): ReplayReport => ({ replayed: [], duplicates: [], failed: [], notFound: [] });

/** Why a dead letter whose event id is no text is not replayed. */
const ID_NOT_TEXT =
  'not replayed: its event_id holds no UTF-8 text (a blob, or bytes a script stored; shown with U+FFFD), so no id can name it; correct event_id in the subscriber database, then replay it';

async function replayOne(deps: ReplayDeps, dead: DeadLetter, report: ReplayReport): Promise<void> {
  if (typeof dead.idKey !== 'string') {
    report.failed.push({ eventId: dead.eventId, error: ID_NOT_TEXT });
    return;
  }
  const key = { eventId: dead.eventId, consumer: deps.consumer };
  const msg: InboxMessage = {
    subject: dead.subject,
    headers: dead.headers,
    payload: dead.payload,
    deliveryCount: dead.deliveries ?? 0,
    fallbackId: dead.eventId,
  };
  const decoded = decodeMessage(deps.registry, msg);
  let error: string;
  if (decoded.ok) {
    try {
      // The dead letter leaves first, in the same transaction: one an operator deleted (or another replay took)
      // since it was read is not applied.
      const fresh = await deps.writer.write(async (tx) => ((await deleteDeadLetter(tx, key)) ? applyOnce(tx, deps, decoded.event) : 'gone'));
      if (fresh === 'gone') {
        report.notFound.push(dead.eventId);
        return;
      }
      (fresh ? report.replayed : report.duplicates).push(dead.eventId);
      (fresh ? deps.metrics.processed : deps.metrics.duplicates).inc({ consumer: deps.consumer });
      return;
    } catch (e) {
      error = `replay failed: ${describeError(e)}`;
    }
  } else {
    error = `replay failed: ${decoded.error}`;
  }
  await deps.writer.write((tx) => recordReplayError(tx, key, error));
  report.failed.push({ eventId: dead.eventId, error });
}
