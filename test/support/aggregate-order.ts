// Per-aggregate event order, in the outbox and on the stream, for tests that check the relay kept it.
import type { TestDb } from './db.ts';
import type { StreamEntry } from './stream.ts';

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
