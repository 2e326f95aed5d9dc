import { jetstreamManager, type StoredMsg } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { natsConnectionOptions } from '../../src/nats/connect.ts';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { createOutboxMetrics } from '../../src/outbox/outbox-metrics.ts';
import { createRelay, type RelayDeps } from '../../src/outbox/relay.ts';
import { createSignal } from '../../src/signal.ts';
import type { TestDb } from './db.ts';

export const TEST_STREAM: StreamSettings = {
  name: 'EVENTS',
  prefix: 'events',
  maxBytes: 256 * 1024 * 1024,
  maxAgeMs: 7 * 24 * 3600 * 1000,
  duplicateWindowMs: 10 * 60 * 1000,
  maxMsgSize: 256 * 1024,
  maxBackoffMs: 30_000,
};

/** Relay dependencies over a test database and NATS URL, with fast back-off; `over` replaces any part. */
export function relayDeps(t: TestDb, url: string, over: Omit<Partial<RelayDeps>, 'settings'> & { settings?: Partial<RelayDeps['settings']> } = {}): RelayDeps {
  const metrics = createMetrics();
  const { settings, ...rest } = over;
  return {
    db: t.deps.db,
    writer: t.deps.writer,
    registry: t.deps.registry,
    clock: t.deps.clock,
    log: t.deps.log,
    metrics: createOutboxMetrics(metrics),
    connect: () => connect(natsConnectionOptions({ servers: [url], name: 'test relay' })),
    stream: TEST_STREAM,
    wake: createSignal(),
    pollMs: 20,
    settings: {
      prefix: TEST_STREAM.prefix,
      batch: 500,
      maxInFlight: 256,
      maxAttempts: 5,
      maxMsgSize: TEST_STREAM.maxMsgSize,
      backoffBaseMs: 20,
      maxBackoffMs: 200,
      publishTimeoutMs: 1000,
      ...settings,
    },
    ...rest,
  };
}

/** Runs a relay until the outbox has nothing due, returning its summary. */
export async function drainOutbox(deps: RelayDeps) {
  return createRelay(deps).run({ untilIdle: true, timeLimitMs: 30_000 });
}

export async function natsClient(url: string): Promise<NatsConnection> {
  return connect({ servers: [url], name: 'test client' });
}

export type StreamEntry = { seq: number; subject: string; headers: Record<string, string>; event: Record<string, unknown> & { eventId: string } };

/** Every message in `stream`, in stream order. */
export async function readStream(nc: NatsConnection, stream = TEST_STREAM.name): Promise<StreamEntry[]> {
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info(stream);
  const out: StreamEntry[] = [];
  for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
    let m: StoredMsg | null;
    try {
      m = await jsm.streams.getMessage(stream, { seq });
    } catch {
      continue;
    }
    if (!m) continue;
    const headers: Record<string, string> = {};
    for (const [k, v] of m.header ?? []) headers[k] = v[0] ?? '';
    out.push({ seq: m.seq, subject: m.subject, headers, event: m.json() });
  }
  return out;
}
