import { jetstream } from '@nats-io/jetstream';
import { headers as natsHeaders, type NatsConnection } from '@nats-io/nats-core';
import { sql } from 'drizzle-orm';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import type { Subscriber } from '../../src/inbox/subscriber.ts';
import type { Logger } from '../../src/logger.ts';
import { eventSubject } from '../../src/nats/stream-settings.ts';
import { partitionOf } from '../../src/outbox/partition.ts';
import { creditedEvent, openedEvent, testSubscriber } from './accounts.ts';
import { createSubscriberDb, type SubscriberDb } from './consumer.ts';

/** A subscriber database with an `applied` table: one row per applied event, in the order the commits made them. */
export async function recordingDb(options: { busyTimeoutMs?: number } = {}): Promise<SubscriberDb> {
  const sdb = await createSubscriberDb(options);
  await sdb.client.execute('CREATE TABLE applied (n INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL)');
  return sdb;
}

/**
 * A subscriber named `name` that records each event it applies in `applied`; it applies `types` (default: every
 * fixture type). With `failingFor`, its handler always fails for the events of that aggregate id (a poison event).
 */
export function recorder(name: string, types?: string[], options: { failingFor?: string } = {}): Subscriber {
  const s = testSubscriber(name, async (tx, event) => {
    if (event.aggregateId === options.failingFor) throw new Error('poison: always fails');
    await tx.run(sql`INSERT INTO applied (event_id) VALUES (${event.eventId})`);
  });
  return types ? { ...s, types } : s;
}

/**
 * A recorder named `name` and the events of a held-back aggregate scenario, with ids unique to this call: a warm-up
 * event, a1 and a2 (versions 1 and 2 of one aggregate), and `poison`, whose handler always fails.
 */
export function heldBackEvents(name: string) {
  const id = `${process.pid}-${Date.now()}`;
  const a = `${name}-a-${id}`;
  const p = `${name}-poison-${id}`;
  return {
    sub: recorder(name, undefined, { failingFor: p }),
    warm: openedEvent({ accountId: `${name}-w-${id}` }),
    a1: openedEvent({ accountId: a }),
    a2: creditedEvent({ accountId: a, version: 2 }),
    poison: openedEvent({ accountId: p }),
  };
}

/** The ids of the applied events, in the order they were applied. */
export async function appliedEvents(sdb: SubscriberDb): Promise<string[]> {
  return (await sdb.client.execute('SELECT event_id FROM applied ORDER BY n')).rows.map((r) => String(r.event_id));
}

export const eventIds = (events: IntegrationEvent[]): string[] => events.map((e) => e.eventId);

/** A logger that keeps each line as `<level> <message> <fields as JSON>`. */
export function logLines(): { log: Logger; lines: string[] } {
  const lines: string[] = [];
  const push = (level: string) => (msg: string, fields?: Record<string, unknown>) => void lines.push(`${level} ${msg} ${JSON.stringify(fields ?? {})}`);
  return { log: { debug: () => undefined, info: push('info'), warn: push('warn'), error: push('error') }, lines };
}

/**
 * Publishes `events` back to back (no wait for one PubAck before the next), 500 at a time, on their partitioned
 * subjects (16 partitions) with the relay's Content-Type and Event-Type headers and Nats-Msg-Id = eventId, unless
 * `o` says otherwise (`msgId: null` sends none; `eventType: false` sends no Event-Type).
 */
export async function publishTogether(
  nc: NatsConnection,
  prefix: string,
  events: IntegrationEvent[],
  o: { msgId?: (e: IntegrationEvent) => string | null; eventType?: boolean } = {},
): Promise<void> {
  const js = jetstream(nc);
  for (let i = 0; i < events.length; i += 500) {
    await Promise.all(
      events.slice(i, i + 500).map((e) => {
        const h = natsHeaders();
        h.set('Content-Type', 'application/json');
        if (o.eventType !== false) h.set('Event-Type', e.type);
        const msgID = o.msgId ? o.msgId(e) : e.eventId;
        const subject = eventSubject(prefix, e.aggregateType, e.aggregateId, partitionOf(e.aggregateType, e.aggregateId, 16));
        return js.publish(subject, JSON.stringify(e), msgID === null ? { headers: h } : { msgID, headers: h });
      }),
    );
  }
}
