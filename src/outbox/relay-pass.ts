import type { MsgHdrs } from '@nats-io/nats-core';
import type { JetStreamClient, PubAck } from '@nats-io/jetstream';
import type { Database } from '../db/open-database.ts';
import type { Writer } from '../db/writer.ts';
import type { EventRegistry } from '../events/registry.ts';
import { eventSubject } from '../nats/stream-settings.ts';
import { backoffDelay } from '../worker/backoff.ts';
import { eventHeaders } from './event-headers.ts';
import type { OutboxMetrics } from './outbox-metrics.ts';
import { createInFlight } from './in-flight.ts';
import { isBrokerUnavailable } from './publish-errors.ts';
import { aggregateKey, fetchPending, markSent, recordFailure, type Floor, type PendingRow } from './relay-store.ts';

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
};

export type RelayPassOptions = {
  /** Rows to leave out: acknowledged by an earlier pass whose mark-sent write is still running. */
  exclude?: readonly number[];
  /** Read only rows above this seq, unless a retry is due (see FETCH_PENDING_SQL); 0 reads from the oldest. */
  floor?: Floor;
  /** Return once the PubAcks are in, with the mark-sent write still running in `marked`. */
  deferMark?: boolean;
};

type Prepared = { subject: string; data: Uint8Array; headers: MsgHdrs };

const encoder = new TextEncoder();

/** Builds subject, body and headers of a row, or throws the permanent error that keeps it from being published. */
function prepare(row: PendingRow, registry: EventRegistry, s: RelayPassSettings): Prepared {
  const event = registry.parse(JSON.parse(row.payload));
  if (event.type !== row.message_type || event.aggregateType !== row.aggregate_type || event.aggregateId !== row.aggregate_id || event.eventId !== row.id) {
    throw new Error('outbox row columns do not match its payload');
  }
  const data = encoder.encode(row.payload);
  const h = eventHeaders(event, JSON.parse(row.headers || '{}') as Record<string, unknown>);
  const headerBytes = 512 + row.id.length;
  if (data.length + headerBytes > s.maxMsgSize) {
    throw new Error(`message of ${data.length} bytes exceeds the stream's maximum message size (${s.maxMsgSize} bytes)`);
  }
  return { subject: eventSubject(s.prefix, row.aggregate_type, row.aggregate_id), data, headers: h };
}

/**
 * One relay pass: fetch due rows in seq order, publish them pipelined (at most maxInFlight awaiting a PubAck,
 * at most one per aggregate)
 * with Nats-Msg-Id = row id, then in one write transaction mark the acknowledged rows sent and record
 * permanent failures. Once a row of an aggregate fails, later rows of that aggregate wait (this pass and
 * later ones, while the failed row waits or is parked). A broker outage ends the pass without touching attempts.
 */
export async function relayPass(deps: RelayPassDeps, js: JetStreamClient, options: RelayPassOptions = {}): Promise<RelayPassResult> {
  const s = deps.settings;
  const nowMs = deps.clock().getTime();
  const { rows, high, epoch } = await fetchPending(deps.db, nowMs, s.batch, options.exclude, options.floor);
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
  };
  if (rows.length === 0) return result;
  if (deps.faults?.markBeforePublish)
    await deps.writer.write((tx) =>
      markSent(
        tx,
        rows.map((r) => r.seq),
        nowMs,
      ),
    );
  await deps.faults?.beforePublishing?.(rows);

  const acked: Array<{ row: PendingRow; ack: PubAck; at: number }> = [];
  const failures: Array<{ row: PendingRow; error: string }> = [];
  const blocked = new Set<string>();
  const inFlight = createInFlight(s.maxInFlight);
  let brokerError: unknown;

  const fail = (row: PendingRow, key: string, error: unknown) => {
    blocked.add(key);
    failures.push({ row, error: error instanceof Error ? error.message : String(error) });
  };

  // At most one message per aggregate awaits its PubAck: a later event of an aggregate is sent only after the
  // earlier one is acknowledged, so a rejection can never let it overtake. Rows are still sent in seq order.
  const pendingByAggregate = new Map<string, Promise<void>>();

  for (const row of rows) {
    await inFlight.slot();
    const key = aggregateKey(row.aggregate_type, row.aggregate_id);
    const previous = pendingByAggregate.get(key);
    if (previous) await previous;
    if (brokerError !== undefined) break;
    if (blocked.has(key)) continue;
    let prepared: Prepared;
    try {
      prepared = prepare(row, deps.registry, s);
    } catch (error) {
      fail(row, key, error);
      continue;
    }
    const injected = deps.faults?.beforePublish?.(row);
    const publish = injected
      ? Promise.reject(injected)
      : js.publish(prepared.subject, prepared.data, { msgID: row.id, headers: prepared.headers, timeout: s.publishTimeoutMs });
    const p: Promise<void> = publish
      .then(
        (ack) => void acked.push({ row, ack, at: deps.clock().getTime() }),
        (error) => {
          if (isBrokerUnavailable(error)) brokerError ??= error;
          else fail(row, key, error);
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
        await markSent(
          tx,
          acked.map((a) => a.row.seq),
          doneMs,
        );
        let parked = 0;
        for (const [k, f] of failures.entries()) {
          if ((await recordFailure(tx, f.row, f.error, retryAt[k]!, s.maxAttempts)) === 'failed') parked++;
        }
        return parked;
      })
      .then((parked) => void (result.parked = parked));
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
  if (failures.length > 0) deps.metrics.publishErrors.inc(undefined, failures.length);
  if (brokerError !== undefined) {
    result.brokerError = brokerError;
    deps.metrics.publishErrors.inc();
  }
  return result;
}
