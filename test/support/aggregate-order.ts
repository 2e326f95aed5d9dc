// Per-aggregate event order, in the outbox and on the stream, for tests that check the relay kept it.
import type { NatsConnection } from '@nats-io/nats-core';
import { expect } from 'vitest';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { countRows, type TestDb } from './db.ts';
import { readStream, type StreamEntry } from './stream.ts';

/** Each aggregate's event ids in outbox (seq) order. */
export async function outboxOrder(t: TestDb): Promise<Map<string, string[]>> {
  const { rows } = await t.client.execute('SELECT id, aggregate_id FROM outbox ORDER BY seq');
  const order = new Map<string, string[]>();
  for (const r of rows) order.set(String(r.aggregate_id), [...(order.get(String(r.aggregate_id)) ?? []), String(r.id)]);
  return order;
}

/** Each aggregate's event ids (Nats-Msg-Id) in stream order. */
export function streamOrder(msgs: StreamEntry[]): Map<string, string[]> {
  const m = new Map<string, string[]>();
  for (const e of msgs) m.set(e.event.aggregateId, [...(m.get(e.event.aggregateId) ?? []), e.headers['Nats-Msg-Id']!]);
  return m;
}

/**
 * Expects `stream` to hold every outbox row's event exactly once, each aggregate's in outbox order, and the outbox to
 * have nothing left to send or fold (no row but `sent`, no entry in outbox_sent).
 */
export async function expectEverySentOnceInOrder(t: TestDb, nc: NatsConnection, stream: StreamSettings): Promise<void> {
  const all = await readStream(nc, stream);
  const got = all.map((m) => m.headers['Nats-Msg-Id']);
  expect(new Set(got).size, 'an event stored twice').toBe(got.length);
  expect(got.length).toBe(await countRows(t.client, 'outbox'));
  const order = streamOrder(all);
  for (const [aggregate, ids] of await outboxOrder(t)) expect(order.get(aggregate), aggregate).toEqual(ids);
  expect(await countRows(t.client, 'outbox', "status != 'sent'")).toBe(0);
  expect(await countRows(t.client, 'outbox_sent')).toBe(0);
}
