import type { MsgHdrs } from '@nats-io/nats-core';
import type { JetStreamClient, PubAck } from '@nats-io/jetstream';
import type { Span, Tracer } from '@opentelemetry/api';
import type { Database } from '../db/open-database.ts';
import type { Writer } from '../db/writer.ts';
import type { EventRegistry } from '../events/registry.ts';
import type { Logger } from '../logger.ts';
import { eventSubject } from '../nats/stream-settings.ts';
import { traceFields, traceHeadersOf } from '../telemetry/trace-context.ts';
import { backoffDelay } from '../worker/backoff.ts';
import { eventHeaders } from './event-headers.ts';
import type { OutboxMetrics, PublishErrorReason } from './outbox-metrics.ts';
import { createInFlight } from './in-flight.ts';
import { isBrokerUnavailable } from './publish-errors.ts';
import { givePartitions } from './outbox-partitions.ts';
import { endPublishSpan, failPublishSpan, startPublishSpan } from './publish-span.ts';
import { aggregateKey, fetchPending, markSent, recordFailure, type Floor, type LeaseFence, type PendingRow } from './relay-store.ts';

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
  /** True when a retried or re-queued row was acknowledged: rows held behind it may now be publishable. */
  ackedRetry: boolean;
  /** Settles when the pass's acknowledged rows are marked sent (at once unless `deferMark`); never unhandled. */
  marked: Promise<void>;
  /** Acknowledged or failed rows the marks left alone (set once `marked` settled): their partition was leased away. */
  fenced: number;
  /** Rows left unpublished because their partition stopped being this relay's during the pass (see `isLeased`). */
  unleased: number;
};

export type RelayPassOptions = {
  /** Rows to leave out: acknowledged by an earlier pass whose mark-sent write is still running. */
  exclude?: readonly number[];
  /** Read only rows above this seq, unless a retry is due (see FETCH_PENDING_SQL); 0 reads from the oldest. */
  floor?: Floor;
  /** Return once the PubAcks are in, with the mark-sent write still running in `marked`. */
  deferMark?: boolean;
  /** Only rows of these leased partitions, and marks fenced by their epochs; every partition, unfenced, when omitted. */
  lease?: LeaseFence;
  /**
   * Asked before each publish: false once the row's partition is no longer this relay's to work on (its lease ran out
   * while a pass was under way, or it is being handed over), and the row is left to the partition's next owner.
   */
  isLeased?: (partition: number) => boolean;
};

type Prepared = { data: Uint8Array; headers: MsgHdrs };

const encoder = new TextEncoder();

/** The headers stored with a row (trace context, correlation id); undefined when they are not a JSON object. */
function storedHeaders(text: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(text || '{}');
    return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Builds body and headers of a row, the message carrying `span`'s trace context, or throws the permanent error
 * that keeps it from being published. Stored headers that are no JSON object, or hold no valid correlation id, only
 * lose those headers: the trace starts anew at the publish span.
 */
function prepare(row: PendingRow, stored: Record<string, unknown> | undefined, span: Span, registry: EventRegistry, s: RelayPassSettings): Prepared {
  const event = registry.parse(JSON.parse(row.payload));
  if (event.type !== row.message_type || event.aggregateType !== row.aggregate_type || event.aggregateId !== row.aggregate_id || event.eventId !== row.id) {
    throw new Error('outbox row columns do not match its payload');
  }
  const data = encoder.encode(row.payload);
  // 512 bytes hold the fixed headers, traceparent and a correlation id; a caller's tracestate comes on top
  const headerBytes = 512 + row.id.length;
  if (data.length + headerBytes > s.maxMsgSize) {
    throw new Error(`message of ${data.length} bytes exceeds the stream's maximum message size (${s.maxMsgSize} bytes)`);
  }
  const { traceparent, tracestate } = traceHeadersOf(span.spanContext());
  const headers = eventHeaders(event, { traceparent, correlationId: stored?.correlationId });
  // trace metadata is optional: a tracestate that would make the message too large is left out, never a reason to park
  if (tracestate !== undefined && data.length + encodedSize(headers, row.id) + `tracestate: ${tracestate}\r\n`.length <= s.maxMsgSize) {
    headers.set('tracestate', tracestate);
  }
  return { data, headers };
}

/** The bytes `headers` take on the wire, with the Nats-Msg-Id header the publish adds (`NATS/1.0`, `k: v` lines). */
function encodedSize(headers: MsgHdrs, msgId: string): number {
  let bytes = 'NATS/1.0\r\n\r\n'.length + `Nats-Msg-Id: ${msgId}\r\n`.length;
  for (const [key, values] of headers) for (const v of values) bytes += key.length + 4 + encoder.encode(v).length;
  return bytes;
}

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
export async function relayPass(deps: RelayPassDeps, js: JetStreamClient, options: RelayPassOptions = {}): Promise<RelayPassResult> {
  const s = deps.settings;
  const nowMs = deps.clock().getTime();
  const fence = options.lease;
  // rows stored without a partition (by a release before partitions) get theirs first; they may sit below the floor
  const partitioned = await givePartitions(deps.db, deps.writer);
  const floor = partitioned > 0 ? undefined : options.floor;
  const { rows, high, epoch } = await fetchPending(deps.db, nowMs, s.batch, options.exclude, floor, fence ? [...fence.epochs.keys()] : undefined);
  const scannedTo: Floor = { seq: rows.length < s.batch ? high : rows.at(-1)!.seq, epoch };
  const result: RelayPassResult = {
    fetched: rows.length,
    published: 0,
    duplicates: 0,
    failed: 0,
    parked: 0,
    ackedSeqs: [],
    scannedTo,
    ackedRetry: false,
    marked: Promise.resolve(),
    fenced: 0,
    unleased: 0,
  };
  if (rows.length === 0) return result;
  if (deps.faults?.markBeforePublish)
    await deps.writer.write((tx) =>
      markSent(
        tx,
        rows.map((r) => r.seq),
        nowMs,
        fence,
      ),
    );
  await deps.faults?.beforePublishing?.(rows);

  const acked: Array<{ row: PendingRow; ack: PubAck; at: number }> = [];
  const failures: Failure[] = [];
  const blocked = new Set<string>();
  const inFlight = createInFlight(s.maxInFlight);
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
      attempt: row.attempts + 1,
      reason,
      error,
    });
  };

  // At most one message per aggregate awaits its PubAck: a later event of an aggregate is sent only after the
  // earlier one is acknowledged, so a rejection can never let it overtake. Rows are still sent in seq order.
  const pendingByAggregate = new Map<string, Promise<void>>();

  for (const row of rows) {
    // Without an await while a slot is free, the publishes of one turn leave in one socket write.
    if (inFlight.full()) await inFlight.slot();
    const key = aggregateKey(row.aggregate_type, row.aggregate_id);
    const previous = pendingByAggregate.get(key);
    if (previous) await previous;
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
    let prepared: Prepared;
    try {
      prepared = prepare(row, stored, span, deps.registry, s);
    } catch (error) {
      fail(row, key, span, error, 'invalid_event');
      continue;
    }
    const injected = deps.faults?.beforePublish?.(row);
    const publish = injected
      ? Promise.reject(injected)
      : js.publish(subject, prepared.data, { msgID: row.id, headers: prepared.headers, timeout: s.publishTimeoutMs });
    const p: Promise<void> = publish
      .then(
        (ack) => {
          acked.push({ row, ack, at: deps.clock().getTime() });
          endPublishSpan(span, ack.duplicate);
        },
        (error) => {
          if (isBrokerUnavailable(error)) {
            brokerError ??= error;
            failPublishSpan(span, error);
          } else fail(row, key, span, error, 'publish_failed');
        },
      )
      .finally(() => {
        if (pendingByAggregate.get(key) === p) pendingByAggregate.delete(key);
      });
    inFlight.track(p);
    pendingByAggregate.set(key, p);
  }
  await inFlight.drained();

  if (acked.length > 0) await deps.faults?.afterPubAcks?.(acked.map((a) => a.row));

  const doneMs = deps.clock().getTime();
  if (acked.length > 0 || failures.length > 0) {
    const retryAt = failures.map((f) => doneMs + backoffDelay(f.row.attempts + 1, { baseMs: s.backoffBaseMs, maxMs: s.maxBackoffMs, random: deps.random }));
    result.marked = deps.writer
      .write(async (tx) => {
        const marked = await markSent(
          tx,
          acked.map((a) => a.row.seq),
          doneMs,
          fence,
        );
        const parked: Failure[] = [];
        let unchanged = 0;
        for (const [k, f] of failures.entries()) {
          const status = await recordFailure(tx, f.row, f.message, retryAt[k]!, s.maxAttempts, fence);
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
            attempts: f.row.attempts + 1,
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
    if (a.row.attempts > 0) result.ackedRetry = true;
    if (a.ack.duplicate) result.duplicates++;
    else result.published++;
    deps.metrics.lag.observe(Math.max(0, a.at - a.row.occurred_at) / 1000);
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
