import { jetstream } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { natsConnectionOptions } from '../../src/nats/connect.ts';
import { eventSubject, type StreamSettings } from '../../src/nats/stream-settings.ts';
import { createOutboxMetrics, type OutboxMetrics } from '../../src/outbox/outbox-metrics.ts';
import { createRelay, type Relay, type RelayDeps, type RelayRunSummary } from '../../src/outbox/relay.ts';
import type { PendingRow } from '../../src/outbox/relay-store.ts';
import { createSignal } from '../../src/signal.ts';
import { MARKED_SENT, type TestDb } from './db.ts';
import { TEST_STREAM } from './stream.ts';

/** What a test may replace in the relay's dependencies; `settings` are merged, their prefix defaults to the stream's. */
export type RelayOverrides = Omit<Partial<RelayDeps>, 'settings'> & { settings?: Partial<RelayDeps['settings']> };

/** Relay dependencies over a test database and NATS URL, publishing to `over.stream` (TEST_STREAM), with fast back-off. */
export function relayDeps(t: TestDb, url: string, over: RelayOverrides = {}): RelayDeps {
  const { settings, ...rest } = over;
  const stream = over.stream ?? TEST_STREAM;
  return {
    db: t.deps.db,
    writer: t.deps.writer,
    registry: t.deps.registry,
    clock: t.deps.clock,
    log: t.deps.log,
    tracer: t.deps.tracer,
    metrics: createOutboxMetrics(createMetrics()),
    connect: () => connect(natsConnectionOptions({ servers: [url], name: 'test relay' })),
    stream,
    wake: createSignal(),
    pollMs: 20,
    partitions: 16,
    lease: { owner: `test-relay-${crypto.randomUUID()}`, ttlMs: 3000 },
    ...rest,
    settings: {
      prefix: stream.prefix,
      batch: 500,
      maxInFlight: 256,
      maxAttempts: 5,
      maxMsgSize: TEST_STREAM.maxMsgSize,
      backoffBaseMs: 20,
      maxBackoffMs: 200,
      publishTimeoutMs: 1000,
      ...settings,
    },
  };
}

/** The sum of every sample of `name` (all its label sets) in a Prometheus scrape; 0 when it has none. */
export function metricTotal(text: string | undefined, name: string): number {
  let sum = 0;
  for (const line of text?.split('\n') ?? []) {
    if (line.startsWith(`${name} `) || line.startsWith(`${name}{`)) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/**
 * What makes a relay publish a row again, counted in its scrape: leases it acquired or lost (a relay stalled past its
 * TTL hands its partitions over), and publishes that failed (a PubAck that timed out, a mark that failed).
 */
export const republishCauses = (text: string | undefined) =>
  metricTotal(text, 'outbox_relay_lease_acquisitions_total') +
  metricTotal(text, 'outbox_relay_lease_losses_total') +
  metricTotal(text, 'outbox_publish_errors_total');

/** Runs a relay until the outbox has nothing due, returning its summary. */
export async function drainOutbox(deps: RelayDeps) {
  return createRelay(deps).run({ untilIdle: true, timeLimitMs: 30_000 });
}

/** A relay running in the background, its metrics, and how to stop it. */
export type RunningRelay = { relay: Relay; metrics: OutboxMetrics; stop(): Promise<RelayRunSummary> };

/** Starts a relay with `deps` (for at most `timeLimitMs`); `stop()` aborts it and resolves with its summary. */
export function runRelay(deps: RelayDeps, timeLimitMs = 60_000): RunningRelay {
  const relay = createRelay(deps);
  const abort = new AbortController();
  const running = relay.run({ signal: abort.signal, timeLimitMs });
  return {
    relay,
    metrics: deps.metrics,
    stop: () => {
      abort.abort();
      return running;
    },
  };
}

/**
 * Publishes every pending row on `nc` as a relay killed after its PubAcks and before its mark leaves them: in the stream
 * under their ids, still pending. Returns how many.
 */
export async function publishAsAKilledRelay(t: TestDb, nc: NatsConnection, stream: StreamSettings): Promise<number> {
  const js = jetstream(nc);
  const rows = (
    await t.client.execute(
      "SELECT id, aggregate_type, aggregate_id, partition, CAST(payload AS BLOB) AS payload FROM outbox WHERE status = 'pending' ORDER BY seq",
    )
  ).rows;
  await Promise.all(
    rows.map((r) =>
      js.publish(eventSubject(stream.prefix, String(r.aggregate_type), String(r.aggregate_id), Number(r.partition)), new Uint8Array(r.payload as ArrayBuffer), {
        msgID: String(r.id),
      }),
    ),
  );
  return rows.length;
}

/**
 * A relay's `faults.beforePublishing` hook that records every fetched row already marked sent (in place or recorded)
 * when the relay was about to publish it: `violations` stays empty while no relay publishes a row twice.
 */
export function republishGuard(t: TestDb) {
  const violations: Array<{ seq: number; id: string; status: string; entry: boolean }> = [];
  const beforePublishing = async (rows: PendingRow[]) => {
    if (rows.length === 0) return;
    const res = await t.client.execute({
      sql: `SELECT seq, id, status, EXISTS (SELECT 1 FROM outbox_sent s WHERE s.seq = outbox.seq AND s.id = outbox.id) AS entry FROM outbox
            WHERE seq IN (SELECT value FROM json_each(?1)) AND ${MARKED_SENT}`,
      args: [JSON.stringify(rows.map((r) => r.seq))],
    });
    for (const r of res.rows) violations.push({ seq: Number(r.seq), id: String(r.id), status: String(r.status), entry: Number(r.entry) === 1 });
  };
  return { violations, beforePublishing };
}
