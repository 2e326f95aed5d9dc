import { createClient, type Client } from '@libsql/client';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { join } from 'node:path';
import type { Database } from '../../src/db/open-database.ts';
import { createWriter, type Writer } from '../../src/db/writer.ts';
import { createAppRegistry } from '../../src/events/catalog.ts';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { createConsumerRunner, type ConsumerRunnerOptions } from '../../src/inbox/consumer-runner.ts';
import type { Subscriber } from '../../src/inbox/subscriber.ts';
import { openSubscriberDatabase } from '../../src/inbox/subscriber-database.ts';
import { silentLogger } from '../../src/logger.ts';
import { createMetrics, type Metrics } from '../../src/metrics/metrics.ts';
import { natsConnectionOptions } from '../../src/nats/connect.ts';
import { ensureStream } from '../../src/nats/ensure-stream.ts';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { createTempDir } from './db.ts';
import { TEST_STREAM } from './relay.ts';

export const CONSUMER_MIGRATIONS = join(import.meta.dirname, '../../db/consumer-migrations');

export type SubscriberDb = { url: string; client: Client; db: Database; writer: Writer; close(): void };

/**
 * A migrated subscriber database (inbox, dead letters, example read models) in its own temp dir; its client waits
 * `busyTimeoutMs` (default 5000) for another process's write lock.
 */
export async function createSubscriberDb(options: { busyTimeoutMs?: number } = {}): Promise<SubscriberDb> {
  const tmp = createTempDir('hono-inbox-');
  const url = `file:${join(tmp.dir, 'subscriber.db')}`;
  const client = createClient({ url, timeout: options.busyTimeoutMs ?? 5000 });
  const db = await openSubscriberDatabase(client, CONSUMER_MIGRATIONS);
  return {
    url,
    client,
    db,
    writer: createWriter(db),
    close() {
      client.close();
      tmp[Symbol.dispose]();
    },
  };
}

let streamNo = 0;
/** A stream name and subject prefix no other test in this process uses. */
export function ownStream(tag = 'IN'): StreamSettings {
  streamNo++;
  return { ...TEST_STREAM, name: `${tag}_T${streamNo}_${process.pid}`, prefix: `${tag.toLowerCase()}${streamNo}` };
}

/** A consumer runner over a subscriber database with fast back-off and nak delays; `over` replaces any option. */
export function testRunner(
  sdb: SubscriberDb,
  natsUrl: string,
  subscriber: Subscriber,
  stream: StreamSettings,
  over: Partial<ConsumerRunnerOptions> & { metrics?: Metrics } = {},
) {
  return createConsumerRunner({
    ...subscriber,
    db: sdb.db,
    writer: sdb.writer,
    registry: createAppRegistry(),
    log: silentLogger,
    metrics: createMetrics(),
    connect: () => connect(natsConnectionOptions({ servers: [natsUrl], name: `test ${subscriber.name}` })),
    stream,
    nakDelayMs: 20,
    maxNakDelayMs: 200,
    backoffBaseMs: 20,
    maxBackoffMs: 200,
    idleCheckMs: 100,
    ...over,
  });
}

let orderNo = 0;
/** A valid `order.placed.v1` integration event; `data` fields may be replaced. */
export function placedEvent(over: { customerId?: string; totalCents?: number; orderId?: string; eventId?: string } = {}): IntegrationEvent {
  orderNo++;
  const orderId = over.orderId ?? `ord-${process.pid}-${orderNo}`;
  const totalCents = over.totalCents ?? 1000;
  const at = new Date(Date.UTC(2026, 0, 1, 0, 0, 0, orderNo)).toISOString();
  return {
    eventId: over.eventId ?? `evt-${process.pid}-${orderNo}`,
    type: 'order.placed.v1',
    aggregateType: 'order',
    aggregateId: orderId,
    aggregateVersion: 1,
    occurredAt: at,
    data: {
      orderId,
      customerId: over.customerId ?? 'cust-1',
      currency: 'EUR',
      items: [{ sku: 'sku-1', quantity: 1, unitPriceCents: totalCents }],
      totalCents,
      placedAt: at,
    },
  };
}

/** Creates the stream as the relay and the runners would. */
export async function createStream(nc: NatsConnection, stream: StreamSettings): Promise<void> {
  await ensureStream(await jetstreamManager(nc), stream);
}

/**
 * Publishes a body to `<prefix>.order.<aggregateId>` as the relay would (any body: tests send broken ones too),
 * with the given Nats-Msg-Id, and waits for the PubAck.
 */
export async function publishRaw(nc: NatsConnection, stream: StreamSettings, body: string | IntegrationEvent, msgId: string, aggregateId = 'x'): Promise<void> {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  const id = typeof body === 'string' ? aggregateId : body.aggregateId;
  const h = natsHeaders();
  h.set('Content-Type', 'application/json');
  await jetstream(nc).publish(`${stream.prefix}.order.${id}`, new TextEncoder().encode(text), { msgID: msgId, headers: h });
}

/** Row count of a table in a subscriber database. */
export async function countRows(client: Client, table: string, where = '1 = 1', args: Array<string | number> = []): Promise<number> {
  return Number((await client.execute({ sql: `SELECT count(*) FROM ${table} WHERE ${where}`, args })).rows[0]![0]);
}

/** Polls `check` every 50 ms until it returns true or `timeoutMs` passes (then throws with `what`). */
export async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
