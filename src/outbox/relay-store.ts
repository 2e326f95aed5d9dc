import { sqlOf, type Database, type SqlRunner, type Tx } from '../db/open-database.ts';
import { integerOrNull, storedText, textOf, textOrBytes, timeMsOrNull } from '../db/column-guards.ts';

export type PendingRow = {
  seq: number;
  id: string;
  aggregate_type: string;
  aggregate_id: string;
  message_type: string;
  /** The stored JSON as UTF-8 bytes, read as a blob: published as it is, never decoded and encoded again. */
  payload: Uint8Array;
  headers: string;
  /** Failed tries so far; null when the column holds no such count (text, a negative or absurd number a script wrote). */
  attempts: number | null;
  /** The occurrence time in ms; null when the column holds no time in the range of a Date. */
  occurred_at: number | null;
  partition: number;
  /** 1 when appendToOutbox validated and wrote the payload and no one changed it since (see row-message.ts), else 0. */
  payload_validated: number;
  /**
   * The first text column that holds no text (a script's blob, or bytes that are no valid UTF-8), whose value above
   * is then shown with U+FFFD in their place: such a row is parked at once. Absent on every other row.
   */
  unreadable?: (typeof TEXT_COLUMNS)[number] | 'payload';
};

/**
 * A relay's leases, which fence its writes: it reads only rows of these partitions, and its mark-sent and
 * record-failure writes change a row only while the row's partition is still leased to `owner` at the same epoch.
 */
export type LeaseFence = { owner: string; epochs: ReadonlyMap<number, number> };

/** The most attempts a row can hold that the relay reads as a count (RELAY_MAX_ATTEMPTS is at most 1000). */
const MAX_READ_ATTEMPTS = 1_000_000;

/**
 * The columns read as text. appendToOutbox writes them from checked strings, and the trigger outbox_payload_edited
 * clears payload_validated when any of them changes, so on a marked row they are valid text.
 */
const TEXT_COLUMNS = ['id', 'aggregate_type', 'aggregate_id', 'message_type', 'headers'] as const;

/** The lease scope of the relays in the outbox database. */
export const RELAY_LEASE_SCOPE = 'relay';

/**
 * Where the fetch's scan starts (it reads rows above it): the caller's floor (`floor`), unless a retried or re-queued
 * row is due at `now` or the count of retried rows sent is no longer `epoch` (see FETCH_PENDING_SQL): then 0.
 */
const SCAN_START = (now: string, floor: string, epoch: string) => `(CASE WHEN EXISTS (
      SELECT 1 FROM outbox r INDEXED BY idx_outbox_retry_due WHERE r.attempts > 0 AND r.status = 'pending' AND r.available_at <= ${now}
    ) OR (SELECT e.retries_sent FROM outbox_relay_epoch e WHERE e.id = 1) IS NOT ${epoch} THEN 0 ELSE ${floor} END)`;

/**
 * The relay's fetch: up to `limit` publishable rows in commit (seq) order. A row is publishable when it is
 * `pending`, due (a fresh row always, whatever the clock of the process that wrote it; a retried or re-queued row
 * once its `available_at` has passed), not among `exclude` (rows of the previous pass, already acknowledged, whose
 * mark-sent write is still running), and no earlier row of its aggregate is parked (`failed`) or waiting out a
 * retry delay. The result is a prefix of the publishable rows in seq order, so an earlier publishable row of an
 * aggregate is in the same result as any later one.
 *
 * `?4` is the caller's floor: every pending row at or below it was held (or being marked) when last read, so the
 * scan starts above it instead of walking a large held backlog on every pass. A held row becomes publishable only
 * when the row holding it is re-queued, comes due or is sent, so the floor is ignored — the scan starts at the
 * oldest pending row — whenever a retried or re-queued row is due (idx_outbox_retry_due answers that in O(log n))
 * or `outbox_relay_epoch` counts a retried row sent since the floor was taken (`?5`; the trigger counts what any
 * process marks, so a second relay cannot leave rows stranded below this one's floor). Such a row is then read by
 * this very pass, before any later row of its aggregate.
 * `?6` is a JSON array of the partitions the relay leases: rows of others are skipped on the index, unread.
 * `exclude` comes split at the floor: `?3` above it, `?7` at or below it. A scan that starts above the floor never
 * reads `?7` (SQLite builds a list's lookup table only when the condition reaches it), so a relay draining a backlog
 * does not build one of the thousands of rows it has in flight or being marked for every batch it reads.
 * A row without a partition yet (no aggregate_hash: stored by a release before partitions, or cleared by the triggers of
 * migration 0007 on a row that did not come from appendToOutbox) is not publishable, nor is
 * any later row of its aggregate (the probe of the normally empty idx_outbox_unhashed): the next pass gives it its
 * partition first (see givePartitions).
 * A pending row with an entry of its seq and id in outbox_sent was published and is only waiting for its mark to be
 * folded in (see markSent): it is not read again.
 * The scan walks idx_outbox_status_seq; the hold check probes the partial index idx_outbox_retrying.
 * A row counts as fresh unless its attempts are above 0, so a negative count (which no release writes) is read at once
 * rather than skipped while later rows of its aggregate go out. Columns a script may fill with anything are read
 * through guards: `attempts` and `occurred_at` come back NULL unless they hold a count or a time the relay can use
 * (the relay parks a row without a count; see relayPass), so one odd row can neither fail the whole fetch (the driver
 * refuses integers past 2^53) nor be retried without a back-off.
 * The payload comes as its stored bytes (UTF-8 JSON, published as they are), except in a database whose text encoding
 * is UTF-16 (a file another tool made): there it comes as text (through textOrBytes unless the row is marked), and
 * fetchPending encodes it to UTF-8.
 * The text columns of a row that did not come from appendToOutbox as it stored it (not payload_validated) are read
 * through textOrBytes: bytes that are no UTF-8 would abort the process in the driver, and the relay would be
 * restarted into the same row for good. fetchPending decodes them and flags a row holding such bytes (`unreadable`).
 */
export const FETCH_PENDING_SQL = `SELECT o.seq, ${TEXT_COLUMNS.map((c) => `CASE WHEN o.payload_validated IS 1 THEN o.${c} ELSE ${textOrBytes(`o.${c}`)} END AS ${c}`).join(', ')},
  CASE WHEN (SELECT encoding FROM pragma_encoding) = 'UTF-8' THEN CAST(o.payload AS BLOB) WHEN o.payload_validated IS 1 THEN o.payload
    ELSE ${textOrBytes('o.payload')} END AS payload,
  ${integerOrNull('o.attempts', 0, MAX_READ_ATTEMPTS)} AS attempts,
  ${timeMsOrNull('o.occurred_at')} AS occurred_at,
  o.partition, o.payload_validated IS 1 AS payload_validated
FROM outbox o
WHERE o.status = 'pending' AND o.partition IN (SELECT value FROM json_each(?6)) AND (NOT (o.attempts > 0) OR o.available_at <= ?1)
  AND o.aggregate_hash IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM outbox_sent s WHERE s.seq = o.seq AND s.id = o.id)
  AND o.seq > ${SCAN_START('?1', '?4', '?5')}
  AND o.seq NOT IN (SELECT value FROM json_each(?3)) AND (o.seq > ?4 OR o.seq NOT IN (SELECT value FROM json_each(?7)))
  AND NOT EXISTS (
    SELECT 1 FROM outbox h
    WHERE h.attempts > 0 AND h.status != 'sent'
      AND h.aggregate_type = o.aggregate_type AND h.aggregate_id = o.aggregate_id AND h.seq < o.seq
      AND (h.status = 'failed' OR h.available_at > ?1))
  AND NOT EXISTS (
    SELECT 1 FROM outbox u INDEXED BY idx_outbox_unhashed
    WHERE u.aggregate_hash IS NULL AND u.status != 'sent'
      AND u.aggregate_type = o.aggregate_type AND u.aggregate_id = o.aggregate_id AND u.seq < o.seq)
ORDER BY o.seq
LIMIT ?2`;

/**
 * The highest seq of the outbox (rows committed later are above it) and the count of retried rows sent, read in the
 * same snapshot as the fetch.
 */
const HIGH_SEQ_SQL = `SELECT coalesce((SELECT max(seq) FROM outbox), 0) AS high, (SELECT retries_sent FROM outbox_relay_epoch WHERE id = 1) AS epoch,
  (SELECT encoding FROM pragma_encoding) AS encoding,
  EXISTS (SELECT 1 FROM outbox_sent WHERE seq > ${SCAN_START('?1', '?2', '?3')}) AS walked_marks`;

/** Where a floor stands: the seq below which rows were held, and the count of retried rows sent when it was taken. */
export type Floor = { seq: number; epoch: number | null };

/** Encodes the payloads a UTF-16 database gives back as text. */
const encoder = new TextEncoder();

/**
 * What the relay read in one snapshot: the publishable rows, the highest seq and the retried-rows-sent count then, and
 * whether the scan started below an entry of outbox_sent (below its floor, or from the oldest pending row when the floor
 * was ignored: see FETCH_PENDING_SQL), so that it walked over rows recorded as sent.
 */
export type Fetched = { rows: PendingRow[]; high: number; epoch: number | null; walkedMarks: boolean };

/** FETCH_PENDING_SQL over every partition: for a caller without leases (a test driving passes by hand). */
const FETCH_ALL_PARTITIONS_SQL = FETCH_PENDING_SQL.replace(' AND o.partition IN (SELECT value FROM json_each(?6))', ' AND ?6 IS NULL');

/** Decodes the text columns textOrBytes gave back as bytes, flagging the row when one holds no text (see `unreadable`). */
function readText(row: Record<string, unknown>): void {
  for (const column of TEXT_COLUMNS) {
    const value = row[column];
    if (typeof value === 'string') continue;
    const text = storedText(value);
    if (text === undefined) row.unreadable ??= column;
    row[column] = text ?? textOf(value);
  }
}

/**
 * Reads up to `limit` rows of `partitions` (all when omitted) that may be published now, above `floor` unless a retry
 * is due, leaving out `exclude` (acknowledged rows still being marked), together with the outbox's highest seq in the
 * same read transaction.
 */
export async function fetchPending(
  db: Database,
  nowMs: number,
  limit: number,
  exclude: readonly number[] = [],
  floor: Floor = { seq: 0, epoch: null },
  partitions?: readonly number[],
): Promise<Fetched> {
  const [fetched, state] = await db.$client.batch(
    [
      {
        sql: partitions ? FETCH_PENDING_SQL : FETCH_ALL_PARTITIONS_SQL,
        args: [
          nowMs,
          limit,
          JSON.stringify(exclude.filter((seq) => seq > floor.seq)),
          floor.seq,
          floor.epoch,
          partitions ? JSON.stringify(partitions) : null,
          JSON.stringify(exclude.filter((seq) => seq <= floor.seq)),
        ],
      },
      { sql: HIGH_SEQ_SQL, args: [nowMs, floor.seq, floor.epoch] },
    ],
    'read',
  );
  const row = state!.rows[0]!;
  const rows = fetched!.rows as unknown as Array<Omit<PendingRow, 'payload'> & { payload: ArrayBuffer | Uint8Array | string }>;
  const utf8 = row.encoding === 'UTF-8';
  for (const r of rows) {
    if (!r.payload_validated) readText(r);
    if (r.payload instanceof Uint8Array) continue;
    if (utf8 || typeof r.payload === 'string') {
      // text: the database stores it as UTF-16, whose bytes are not the UTF-8 JSON the stream carries
      r.payload = typeof r.payload === 'string' ? encoder.encode(r.payload) : new Uint8Array(r.payload);
      continue;
    }
    // a UTF-16 database's unmarked payload that is no valid text (a lone surrogate), through textOrBytes
    const text = storedText(r.payload);
    if (text === undefined) r.unreadable ??= 'payload';
    r.payload = encoder.encode(text ?? textOf(r.payload));
  }
  const epoch = row.epoch === null ? null : Number(row.epoch);
  return { rows: rows as PendingRow[], high: Number(row.high), epoch, walkedMarks: Number(row.walked_marks) === 1 };
}

export const aggregateKey = (type: string, id: string) => `${type}\u0000${id}`;

/**
 * The condition fencing a write: the row's partition is leased to ?owner at the epoch the relay holds (`?fence`: [[p, e], …]).
 * `+partition` keeps SQLite from probing idx_outbox_status_seq once per leased partition for every seq of a mark (16
 * probes a row, half the mark's cost): the seq finds the row, and its partition is then checked against the list.
 */
const FENCED = (owner: string, fence: string) => `AND +partition IN (
    SELECT l.partition FROM leases l, json_each(${fence}) j
    WHERE l.scope = '${RELAY_LEASE_SCOPE}' AND l.owner = ${owner} AND l.partition = j.value ->> '$[0]' AND l.epoch = j.value ->> '$[1]')`;

/**
 * The rows a mark may change: pending, among the seqs acknowledged (?2, a JSON array) and still holding the event ids
 * that were published (?3): a row stored again under its seq with another event between the publish and the mark (a
 * restore, a script's `INSERT OR REPLACE`) was not published, and is left pending. `+id` keeps the search on the seq.
 */
const ACKNOWLEDGED = `status = 'pending' AND seq IN (SELECT value FROM json_each(?2)) AND +id IN (SELECT value FROM json_each(?3))`;
/** markSent's statement: ?1 the time, ?2 and ?3 the acknowledged rows' seqs and ids. */
export const MARK_SENT_SQL = `UPDATE outbox SET status = 'sent', sent_at = ?1 WHERE ${ACKNOWLEDGED}`;
/** The fence of markSent's statements: ?4 the owner, ?5 its partitions and epochs as JSON ([[p, e], …]). */
const MARK_FENCE = FENCED('?4', '?5');
/** markSent's statement with a fence. */
export const MARK_SENT_FENCED_SQL = `${MARK_SENT_SQL} ${MARK_FENCE}`;

const fenceArgs = (fence: LeaseFence) => [fence.owner, JSON.stringify([...fence.epochs])];

/**
 * markSent's statement with `later`: an entry in outbox_sent for each fresh row (never tried before), which costs the
 * same whatever the row's size, where the UPDATE writes the whole row again. Retried rows are still marked by the
 * UPDATE: their mark must move the epoch (trigger outbox_retry_sent) and release the rows held behind them.
 */
export const MARK_LATER_SQL = `INSERT OR REPLACE INTO outbox_sent (seq, id, sent_at) SELECT seq, id, ?1 FROM outbox
  WHERE ${ACKNOWLEDGED} AND NOT (attempts > 0)`;
const MARK_RETRIED_SQL = `${MARK_SENT_SQL} AND attempts > 0`;

/**
 * Marks acknowledged rows sent (each by its seq, while it still holds the event id that was published); with `fence`,
 * only rows of partitions still leased to it. Must be called inside a write transaction. With `later` (a relay draining
 * a backlog: the most entries outbox_sent may hold), fresh rows are recorded in outbox_sent instead, to be folded into
 * the outbox by foldSentMarks once the relay has caught up, while it holds fewer than `later` entries; from there on
 * rows are marked in place (a recorded mark costs its row's rewrite at the fold anyway), so outbox_sent stays small
 * enough for every scan that walks it (a fetch from the oldest pending row, the stats). Returns how many rows it marked.
 */
export async function markSent(tx: Tx, rows: ReadonlyArray<{ seq: number; id: string }>, nowMs: number, fence?: LeaseFence, later?: number): Promise<number> {
  if (rows.length === 0) return 0;
  const seqs = rows.map((r) => r.seq);
  const args = [nowMs, JSON.stringify(seqs), JSON.stringify(rows.map((r) => r.id)), ...(fence ? fenceArgs(fence) : [])];
  const fenced = (sql: string) => (fence ? `${sql} ${MARK_FENCE}` : sql);
  if (later === undefined || (await recordedAtLeast(tx, later))) return (await sqlOf(tx).execute({ sql: fenced(MARK_SENT_SQL), args })).rowsAffected;
  let marked = (await sqlOf(tx).execute({ sql: fenced(MARK_LATER_SQL), args })).rowsAffected;
  if (marked < seqs.length) marked += (await sqlOf(tx).execute({ sql: fenced(MARK_RETRIED_SQL), args })).rowsAffected;
  return marked;
}

/** How many entries outbox_sent holds: a plain count(*), which SQLite answers from the table's pages alone. */
export async function countSentMarks(run: SqlRunner): Promise<number> {
  return Number((await run.execute('SELECT count(*) AS n FROM outbox_sent')).rows[0]!.n);
}

/** Whether outbox_sent holds `n` entries or more. */
async function recordedAtLeast(tx: Tx, n: number): Promise<boolean> {
  return (await countSentMarks(sqlOf(tx))) >= n;
}

/** foldSentMarks' statements: ?1 how many entries, the oldest first. */
export const FOLD_SQL = `UPDATE outbox SET status = 'sent', sent_at = (SELECT s.sent_at FROM outbox_sent s WHERE s.seq = outbox.seq)
  WHERE seq IN (SELECT seq FROM outbox_sent ORDER BY seq LIMIT ?1) AND status = 'pending'
    AND id = (SELECT s.id FROM outbox_sent s WHERE s.seq = outbox.seq)`;
export const FOLDED_SQL = 'DELETE FROM outbox_sent WHERE seq IN (SELECT seq FROM outbox_sent ORDER BY seq LIMIT ?1)';

/**
 * Folds up to `limit` entries of outbox_sent (the oldest first) into the outbox: their rows become `sent` at the time
 * recorded, and the entries go, including those whose row is gone or holds another event now. Must be called inside a
 * write transaction; needs no lease (the rows were published). Returns how many entries it removed: fewer than
 * `limit` when none is left.
 */
export async function foldSentMarks(tx: Tx, limit: number): Promise<number> {
  await sqlOf(tx).execute({ sql: FOLD_SQL, args: [limit] });
  return (await sqlOf(tx).execute({ sql: FOLDED_SQL, args: [limit] })).rowsAffected;
}

/**
 * Records a permanent publish failure: attempts + 1, last_error, the next try after `retryAtMs`, and status
 * `failed` once attempts reach `maxAttempts`. Must be called inside a write transaction. Returns the new status, or
 * `unchanged` when the row is no longer pending at the attempts it was read with (another relay moved it) or, with
 * `fence`, its partition is no longer leased to it.
 */
export async function recordFailure(
  tx: Tx,
  row: { seq: number; attempts: number },
  error: string,
  retryAtMs: number,
  maxAttempts: number,
  fence?: LeaseFence,
): Promise<'pending' | 'failed' | 'unchanged'> {
  const status = row.attempts + 1 >= maxAttempts ? 'failed' : 'pending';
  const res = await sqlOf(tx).execute({
    sql: `UPDATE outbox SET attempts = attempts + 1, last_error = ?1, available_at = ?2, status = ?3
          WHERE seq = ?4 AND status = 'pending' AND attempts = ?5 ${fence ? FENCED('?6', '?7') : ''}`,
    args: [error.slice(0, 2000), retryAtMs, status, row.seq, row.attempts, ...(fence ? fenceArgs(fence) : [])],
  });
  return res.rowsAffected === 0 ? 'unchanged' : status;
}

/**
 * Parks a row at once (status `failed`, `last_error`): one whose `attempts` column held no count the relay can use
 * (see FETCH_PENDING_SQL). Its attempts become `attempts`, so a row retried by an operator is read as any other.
 * Must be called inside a write transaction; with `fence`, only while its partition is leased to it. Returns whether
 * the row was parked (false: no longer pending, or fenced).
 */
export async function parkRow(tx: Tx, seq: number, error: string, attempts: number, fence?: LeaseFence): Promise<boolean> {
  const res = await sqlOf(tx).execute({
    sql: `UPDATE outbox SET status = 'failed', last_error = ?1, attempts = ?2 WHERE seq = ?3 AND status = 'pending' ${fence ? FENCED('?4', '?5') : ''}`,
    args: [error.slice(0, 2000), attempts, seq, ...(fence ? fenceArgs(fence) : [])],
  });
  return res.rowsAffected > 0;
}
