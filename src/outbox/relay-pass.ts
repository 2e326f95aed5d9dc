import type { MsgHdrs } from '@nats-io/nats-core';
import type { PubAck } from '@nats-io/jetstream';
import type { AckCallback, AckPublisher } from '../nats/ack-publisher.ts';
import type { Span, Tracer } from '@opentelemetry/api';
import type { Database } from '../db/open-database.ts';
import type { Writer } from '../db/writer.ts';
import type { EventRegistry } from '../events/registry.ts';
import type { Logger } from '../logger.ts';
import { eventSubject } from '../nats/stream-settings.ts';
import { traceFields, traceHeadersOf } from '../telemetry/trace-context.ts';
import { backoffDelay } from '../worker/backoff.ts';
import { eventHeaders } from './event-headers.ts';
import { headerFieldsOf, sameEvent } from './row-message.ts';
import type { OutboxMetrics, PublishErrorReason } from './outbox-metrics.ts';
import { isBrokerUnavailable } from './publish-errors.ts';
import { givePartitions } from './outbox-partitions.ts';
import { endPublishSpan, failPublishSpan, startPublishSpan } from './publish-span.ts';
import { aggregateKey, fetchPending, markSent, parkRow, recordFailure, type Fetched, type Floor, type LeaseFence, type PendingRow } from './relay-store.ts';

export type RelayPassSettings = {
  prefix: string;
  batch: number;
  maxInFlight: number;
  maxAttempts: number;
  maxMsgSize: number;
  backoffBaseMs: number;
  maxBackoffMs: number;
  publishTimeoutMs: number;
};

/** Test-only fault injection at the relay's dangerous points. */
export type RelayFaults = {
  /** Returning an error makes that publish fail as if the broker had answered with it. */
  beforePublish?(row: PendingRow): Error | undefined;
  /** Runs after the PubAcks of a pass and before they are marked sent; throwing simulates a crash there. */
  afterPubAcks?(acked: PendingRow[]): void | Promise<void>;
  /** The broken variant the torture checker must catch: mark rows sent before publishing them. */
  markBeforePublish?: boolean;
  /** Runs after the rows of a pass were fetched (and, in the broken variant, marked) and before any is published. */
  beforePublishing?(rows: PendingRow[]): void | Promise<void>;
};

export type RelayPassDeps = {
  db: Database;
  writer: Writer;
  registry: EventRegistry;
  clock: () => Date;
  log: Logger;
  /** Starts each publish's PRODUCER span, whose context the message carries as `traceparent`/`tracestate`. */
  tracer: Tracer;
  metrics: OutboxMetrics;
  settings: RelayPassSettings;
  random?: () => number;
  faults?: RelayFaults;
};

export type RelayPassResult = {
  fetched: number;
  published: number;
  duplicates: number;
  failed: number;
  parked: number;
  /** Set when the broker was unavailable: the pass stopped early and the worker should back off. */
  brokerError?: unknown;
  /** The seqs acknowledged by the broker in this pass (marked sent by `marked`). */
  ackedSeqs: number[];
  /**
   * How far the fetch read the outbox: every pending row at or below it that this pass did not publish was held
   * behind an earlier row of its aggregate (or was being marked). The next pass's floor, unless the caller resets it.
   */
  scannedTo: Floor;
  /** True when the last fetch of the pass came back full: more rows are probably waiting. */
  more: boolean;
  /** True when a retried or re-queued row was acknowledged: rows held behind it may now be publishable. */
  ackedRetry: boolean;
  /** Settles when the pass's acknowledged rows are marked sent (at once unless `deferMark`); never unhandled. */
  marked: Promise<void>;
  /** Acknowledged or failed rows the marks left alone (set once `marked` settled): their partition was leased away. */
  fenced: number;
  /** Rows left unpublished because their partition stopped being this relay's during the pass (see `isLeased`). */
  unleased: number;
  /** True when a fetch of the pass started below an entry of outbox_sent (see Fetched.walkedMarks). */
  walkedMarks: boolean;
};

export type RelayPassOptions = {
  /**
   * How many more batches the pass may fetch, each once the previous one's rows are all sent (their PubAcks still
   * coming), while batches come back full; 0 (the default) fetches once. The marks of every batch are written together.
   */
  continuations?: number;
  /** Rows to leave out: acknowledged by an earlier pass whose mark-sent write is still running. */
  exclude?: readonly number[];
  /** Read only rows above this seq, unless a retry is due (see FETCH_PENDING_SQL); 0 reads from the oldest. */
  floor?: Floor;
  /** Return once the PubAcks are in, with the mark-sent write still running in `marked`. */
  deferMark?: boolean;
  /**
   * When the pass's last fetch came back full (a backlog) and none of its fetches walked over recorded marks, record its
   * fresh rows in outbox_sent, holding at most this many entries, instead of rewriting them (see markSent); whoever sets
   * it folds those entries in later (foldSentMarks), and at once after a pass that walked over them (`walkedMarks`).
   */
  markLater?: number;
  /** Only rows of these leased partitions, and marks fenced by their epochs; every partition, unfenced, when omitted. */
  lease?: LeaseFence;
  /**
   * Asked before each publish: false once the row's partition is no longer this relay's to work on (its lease ran out
   * while a pass was under way, or it is being handed over), and the row is left to the partition's next owner.
   */
  isLeased?: (partition: number) => boolean;
  /**
   * The message the stream holds at a sequence: its subject and body, `gone` when it holds none any more, or null when
   * it cannot be read (the broker refuses the lookup). A PubAck saying `duplicate` names the message stored earlier
   * under the row's id; the row is marked sent only when that message is the row's event (the same bytes, or JSON the
   * registry parses to the same event: see sameEvent) on the row's subject or the same aggregate's subject under another
   * partition token (an earlier partition count), else it failed: an id reused for another event, the event stored on a
   * subject its subscribers do not read, or a message no longer there would otherwise be marked sent though no
   * subscriber may have it. A message that cannot be read, or no lookup at all, leaves the duplicate as the broker says.
   */
  storedMessage?: (seq: number) => Promise<StoredMessage | 'gone' | null>;
};

/** A message the stream holds: where and what. */
export type StoredMessage = { subject: string; data: Uint8Array };

type Prepared = { data: Uint8Array; headers: MsgHdrs };

/** Why a row whose id the stream already holds for another body is not marked sent. */
const anotherMessage = (id: string, seq: number) =>
  `the stream already holds another message under Nats-Msg-Id ${id} (stream sequence ${seq}): an event id was used twice`;

/** Why a row whose id the stream remembers for a message it no longer holds is not marked sent. */
const goneMessage = (id: string, seq: number) =>
  `the stream remembers Nats-Msg-Id ${id} for a message it no longer holds (stream sequence ${seq}), so nothing shows the event reached its subscribers: re-queued once the stream's duplicate window has passed, it is published anew`;

/**
 * Whether `stored` is the subject `own` of the same aggregate under another partition token: the relay's own publish
 * under an earlier partition count, which subscribers read before they move to the new count.
 */
function sameAggregateSubject(stored: string, own: string): boolean {
  const base = own.slice(0, own.lastIndexOf('.') + 1);
  return stored.length > base.length && stored.startsWith(base) && /^[0-9]+$/.test(stored.slice(base.length));
}

/** Why a row whose event the stream already holds on another subject is not marked sent. */
const anotherSubject = (id: string, seq: number, stored: string, own: string) =>
  `the stream already holds this event under Nats-Msg-Id ${id} on subject ${stored} (stream sequence ${seq}), not on ${own} where its subscribers read it: publish it there, or under another id`;

/** Why a row whose attempts column holds no usable count is parked (see FETCH_PENDING_SQL). */
const UNCOUNTED =
  'the attempts column holds no count of attempts (text, a negative or an absurd number): parked with attempts reset, retry it once the row is checked';

/** Why a row with a text column holding a blob or bytes that are no valid text is parked (see FETCH_PENDING_SQL). */
const unreadable = (column: string) =>
  `the ${column} column holds no text (a blob, or bytes that are not valid UTF-8; listed with U+FFFD in their place): parked, correct the row and re-queue it`;

/** How far a fetch read the outbox: the highest seq when it came back partial, else its last row. */
const scannedToOf = (f: Fetched, batch: number): Floor => ({ seq: f.rows.length < batch ? f.high : f.rows.at(-1)!.seq, epoch: f.epoch });

/** The headers stored with a row (trace context, correlation id); undefined when they are not a JSON object. */
function storedHeaders(text: string): Record<string, unknown> | undefined {
  if (text === '{}' || text === '') return {};
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Builds body and headers of a row, the message carrying `span`'s trace context, or throws the permanent error
 * that keeps it from being published. The body is the stored bytes as they are. Stored headers that are no JSON
 * object, or hold no valid correlation id, only lose those headers: the trace starts anew at the publish span.
 */
function prepare(row: PendingRow, stored: Record<string, unknown> | undefined, span: Span, registry: EventRegistry, s: RelayPassSettings): Prepared {
  const fields = headerFieldsOf(row, registry);
  const data = row.payload;
  // 512 bytes hold the fixed headers, traceparent and a correlation id; a caller's tracestate comes on top
  const headerBytes = 512 + row.id.length;
  if (data.length + headerBytes > s.maxMsgSize) {
    throw new Error(`message of ${data.length} bytes exceeds the stream's maximum message size (${s.maxMsgSize} bytes)`);
  }
  const { traceparent, tracestate } = traceHeadersOf(span.spanContext());
  const headers = eventHeaders(fields, { traceparent, correlationId: stored?.correlationId, msgId: row.id });
  // trace metadata is optional: a tracestate that would make the message too large is left out, never a reason to park
  if (tracestate !== undefined && data.length + encodedSize(headers) + `tracestate: ${tracestate}\r\n`.length <= s.maxMsgSize) {
    headers.set('tracestate', tracestate);
  }
  return { data, headers };
}

const encoder = new TextEncoder();

/** The bytes `headers` take on the wire (`NATS/1.0`, `k: v` lines). */
function encodedSize(headers: MsgHdrs): number {
  let bytes = 'NATS/1.0\r\n\r\n'.length;
  for (const [key, values] of headers) for (const v of values) bytes += key.length + 4 + encoder.encode(v).length;
  return bytes;
}

/** A row on its way to the broker: its aggregate's key, its publish span and the subject it went to. */
type Sent = { row: PendingRow; key: string; span: Span; subject: string };

/** A row that was not published this pass: why (the error's message is stored as last_error) and its span. */
type Failure = { row: PendingRow; error: unknown; message: string; reason: PublishErrorReason; span: Span };

/**
 * One relay pass: fetch due rows in seq order, publish them pipelined (at most maxInFlight awaiting a PubAck,
 * at most one per aggregate)
 * with Nats-Msg-Id = row id, then in one write transaction mark the acknowledged rows sent and record
 * permanent failures. Once a row of an aggregate fails, later rows of that aggregate wait (this pass and
 * later ones, while the failed row waits or is parked). A broker outage ends the pass without touching attempts.
 * Each row tried gets a PRODUCER span (child of the trace stored with it), ended at its PubAck or failure; the
 * message carries that span's `traceparent`/`tracestate`, and the row's log lines its trace_id/span_id.
 */
export async function relayPass(deps: RelayPassDeps, publisher: AckPublisher, options: RelayPassOptions = {}): Promise<RelayPassResult> {
  const s = deps.settings;
  const nowMs = deps.clock().getTime();
  const fence = options.lease;
  // rows without a partition (stored by a release before partitions, or by a script) get theirs first; they may sit below the floor
  const partitioned = await givePartitions(deps.db, deps.writer);
  const floor = partitioned > 0 ? undefined : options.floor;
  const partitions = fence ? [...fence.epochs.keys()] : undefined;
  const first = await fetchPending(deps.db, nowMs, s.batch, options.exclude, floor, partitions);
  let rows = first.rows;
  const result: RelayPassResult = {
    fetched: rows.length,
    published: 0,
    duplicates: 0,
    failed: 0,
    parked: 0,
    ackedSeqs: [],
    scannedTo: scannedToOf(first, s.batch),
    more: rows.length >= s.batch,
    ackedRetry: false,
    marked: Promise.resolve(),
    fenced: 0,
    unleased: 0,
    walkedMarks: first.walkedMarks,
  };
  if (rows.length === 0) return result;
  /** What every fetched batch goes through before its rows are published (the faults of the tests). */
  const fetched = async (batch: PendingRow[]) => {
    if (deps.faults?.markBeforePublish) await deps.writer.write((tx) => markSent(tx, batch, nowMs, fence));
    await deps.faults?.beforePublishing?.(batch);
  };
  await fetched(rows);

  const acked: Array<{ row: PendingRow; ack: PubAck; at: number }> = [];
  const failures: Failure[] = [];
  const blocked = new Set<string>();
  let brokerError: unknown;

  const fail = (row: PendingRow, key: string, span: Span, error: unknown, reason: PublishErrorReason) => {
    blocked.add(key);
    const message = error instanceof Error ? error.message : String(error);
    failures.push({ row, error, message, reason, span });
    failPublishSpan(span, error);
    deps.log.warn('relay: a row could not be published; it is retried after a back-off, or parked after its last attempt', {
      ...traceFields(span.spanContext()),
      id: row.id,
      type: row.message_type,
      attempt: (row.attempts ?? 0) + 1,
      reason,
      error,
    });
  };

  // At most one message per aggregate awaits its PubAck: a later event of an aggregate is sent only after the
  // earlier one is acknowledged, so a rejection can never let it overtake. Rows are still sent in seq order.
  // The loop is the only waiter: for a free slot (`wake`), or for the one aggregate it needs (`awaiting`). Two
  // callbacks per publish and no promise of its own: per-row promise chains were a sizeable share of the relay's CPU.
  const unacked = new Set<string>();
  let live = 0;
  let wake: (() => void) | undefined;
  let awaiting: { key: string; resolve: () => void } | undefined;
  const settled = (key: string) => {
    live--;
    unacked.delete(key);
    if (awaiting?.key === key) {
      const { resolve } = awaiting;
      awaiting = undefined;
      resolve();
    }
    if (wake) {
      const resolve = wake;
      wake = undefined;
      resolve();
    }
  };
  const freeSlot = () => new Promise<void>((resolve) => (wake = resolve));

  // One pair of callbacks for the whole pass, told each message by its `Sent`: a closure per row cost the relay's
  // thread its allocation and, under tsx, a name defined on every one of them.
  const finish = (sent: Sent, error: unknown, ack?: PubAck) => {
    try {
      if (ack) {
        acked.push({ row: sent.row, ack, at: deps.clock().getTime() });
        endPublishSpan(sent.span, ack.duplicate);
      } else if (isBrokerUnavailable(error)) {
        brokerError ??= error;
        failPublishSpan(sent.span, error);
      } else fail(sent.row, sent.key, sent.span, error, 'publish_failed');
    } finally {
      settled(sent.key);
    }
  };
  const { storedMessage } = options;
  const done: AckCallback<Sent> = (error, ack, sent) => {
    if (!ack?.duplicate || !storedMessage) return finish(sent, error, ack);
    const { row, subject } = sent;
    // the row's aggregate stays in flight (its later rows wait) until the stored message is compared with it
    storedMessage(ack.seq).then(
      (stored) => {
        if (stored === null) return finish(sent, undefined, ack);
        if (stored === 'gone') return finish(sent, new Error(goneMessage(row.id, ack.seq)));
        if (!sameEvent(stored.data, row.payload, deps.registry)) return finish(sent, new Error(anotherMessage(row.id, ack.seq)));
        if (stored.subject !== subject && !sameAggregateSubject(stored.subject, subject))
          return finish(sent, new Error(anotherSubject(row.id, ack.seq, stored.subject, subject)));
        finish(sent, undefined, ack);
      },
      (lookupError: unknown) => finish(sent, lookupError),
    );
  };

  // Continuation fetches: with the last rows of a full batch sent, the next batch is read while their PubAcks are
  // on the way, instead of after all of them came back, so the broker always has a window of messages to store.
  // Rows fetched earlier in the pass (still in flight, or not yet marked) are left out of the next fetch; the
  // pass's in-flight aggregates, blocked aggregates and failures carry over, so order holds across its batches.
  const seen: number[] = [...(options.exclude ?? [])];
  for (let batches = 1; ; batches++) {
    for (const row of rows) {
      // Without an await while a slot is free, the publishes of one turn leave in one socket write.
      while (live >= s.maxInFlight) await freeSlot();
      const key = aggregateKey(row.aggregate_type, row.aggregate_id);
      if (unacked.has(key)) await new Promise<void>((resolve) => (awaiting = { key, resolve }));
      if (brokerError !== undefined) break;
      if (blocked.has(key)) continue;
      if (options.isLeased && !options.isLeased(row.partition)) {
        // the later rows of its aggregate are in the same partition: they are skipped too
        blocked.add(key);
        result.unleased++;
        continue;
      }
      const subject = eventSubject(s.prefix, row.aggregate_type, row.aggregate_id, row.partition);
      const stored = storedHeaders(row.headers);
      const span = startPublishSpan(deps.tracer, subject, row, stored);
      if (row.attempts === null || row.unreadable) {
        // no count to retry it by, or bytes no retry can read: parked at once, and its aggregate's later rows wait behind it
        fail(row, key, span, new Error(row.unreadable ? unreadable(row.unreadable) : UNCOUNTED), 'invalid_event');
        continue;
      }
      let prepared: Prepared;
      try {
        prepared = prepare(row, stored, span, deps.registry, s);
      } catch (error) {
        fail(row, key, span, error, 'invalid_event');
        continue;
      }
      live++;
      unacked.add(key);
      const sent: Sent = { row, key, span, subject };
      const injected = deps.faults?.beforePublish?.(row);
      if (injected) queueMicrotask(() => done(injected, undefined, sent));
      else publisher.publish(subject, prepared.data, prepared.headers, done, sent);
    }
    // a failure ends the pass early: it is recorded (and its retry scheduled) before anything else is read
    if (!result.more || brokerError !== undefined || failures.length > 0 || batches > (options.continuations ?? 0)) break;
    for (const r of rows) seen.push(r.seq);
    const next = await fetchPending(deps.db, deps.clock().getTime(), s.batch, seen, result.scannedTo, partitions);
    // PubAcks and rejections that came in meanwhile: a failure or an outage leaves the batch unread after all
    if (failures.length > 0 || brokerError !== undefined) break;
    rows = next.rows;
    result.walkedMarks ||= next.walkedMarks;
    result.fetched += rows.length;
    result.scannedTo = scannedToOf(next, s.batch);
    result.more = rows.length >= s.batch;
    if (rows.length === 0) break;
    await fetched(rows);
  }
  while (live > 0) await freeSlot();

  if (acked.length > 0) await deps.faults?.afterPubAcks?.(acked.map((a) => a.row));

  const doneMs = deps.clock().getTime();
  if (acked.length > 0 || failures.length > 0) {
    const retryAt = failures.map(
      (f) => doneMs + backoffDelay((f.row.attempts ?? 0) + 1, { baseMs: s.backoffBaseMs, maxMs: s.maxBackoffMs, random: deps.random }),
    );
    result.marked = deps.writer
      .write(async (tx) => {
        const marked = await markSent(
          tx,
          acked.map((a) => a.row),
          doneMs,
          fence,
          options.markLater !== undefined && result.more && !result.walkedMarks ? options.markLater : undefined,
        );
        const parked: Failure[] = [];
        let unchanged = 0;
        for (const [k, f] of failures.entries()) {
          const { attempts } = f.row;
          const status =
            attempts === null || f.row.unreadable
              ? (await parkRow(tx, f.row.seq, f.message, s.maxAttempts, fence))
                ? 'failed'
                : 'unchanged'
              : await recordFailure(tx, { seq: f.row.seq, attempts }, f.message, retryAt[k]!, s.maxAttempts, fence);
          if (status === 'failed') parked.push(f);
          else if (status === 'unchanged') unchanged++;
        }
        return { parked, fenced: acked.length - marked + unchanged };
      })
      .then(({ parked, fenced }) => {
        result.parked = parked.length;
        result.fenced = fenced;
        if (fenced > 0) deps.log.warn('relay: rows of a partition leased away since they were read were left to its new owner', { rows: fenced });
        deps.metrics.parked.inc(undefined, parked.length);
        for (const f of parked) {
          deps.log.warn('relay: row parked as failed after its last attempt; list it with outbox:failed or GET /admin/outbox/failed', {
            ...traceFields(f.span.spanContext()),
            id: f.row.id,
            type: f.row.message_type,
            attempts: (f.row.attempts ?? s.maxAttempts - 1) + 1,
            error: f.message,
          });
        }
      });
    // Whoever defers the mark awaits it later; until then a rejection (a busy database) must not surface as an
    // unhandled rejection, which would end the process.
    result.marked.catch(() => undefined);
    if (!options.deferMark) await result.marked;
  }

  for (const a of acked) {
    result.ackedSeqs.push(a.row.seq);
    if ((a.row.attempts ?? 0) > 0) result.ackedRetry = true;
    if (a.ack.duplicate) result.duplicates++;
    else result.published++;
    // a row without a usable occurred_at (a script's) has no lag to tell
    if (a.row.occurred_at !== null) deps.metrics.lag.observe(Math.max(0, a.at - a.row.occurred_at) / 1000);
  }
  deps.metrics.published.inc(undefined, result.published);
  deps.metrics.duplicates.inc(undefined, result.duplicates);
  result.failed = failures.length;
  for (const f of failures) deps.metrics.publishErrors.inc(f.reason);
  if (brokerError !== undefined) {
    result.brokerError = brokerError;
    deps.metrics.publishErrors.inc('broker_unavailable');
  }
  return result;
}
