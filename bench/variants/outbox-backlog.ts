// A backlog of pending outbox rows, written straight into the service database the way POST /orders writes them
// (src/outbox/append-to-outbox.ts): one `order.placed.v1` event per new order (distinct aggregates), its payload
// the registry-parsed event as JSON, the request's headers, aggregate_hash = FNV-1a of the aggregate
// (src/outbox/partition.ts, computed here) and partition = hash % outbox_partitions.count, status pending. Rows are
// generated in JS and inserted a chunk per transaction through one `INSERT … SELECT … FROM json_each(?)`.
import type { Client } from '@libsql/client';
import { registryOf } from '../../src/compose/define-modules.ts';
import { createUuidV7 } from '../../src/ids.ts';
import { modules } from '../../src/modules.ts';
import { aggregateHash } from '../../src/outbox/partition.ts';
import { orderBody } from '../../test/support/example-orders.ts';

// payload_validated = 1: each payload is the registry's serialization of a valid event, as appendToOutbox marks it
const INSERT_SQL = `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, headers, status, attempts, occurred_at, available_at, aggregate_hash, partition, payload_validated)
  SELECT j.value ->> 0, 'order', j.value ->> 1, 'order.placed.v1', j.value ->> 2, j.value ->> 3, 'pending', 0, j.value ->> 4, j.value ->> 4, j.value ->> 5,
         (j.value ->> 5) % (SELECT count FROM outbox_partitions WHERE id = 1), 1
  FROM json_each(?) AS j`;

export type BacklogProgress = { inserted: number; chunkMs: number };

const hex = (bytes: number) => Array.from(crypto.getRandomValues(new Uint8Array(bytes)), (b) => b.toString(16).padStart(2, '0')).join('');

/**
 * Headers like the ones a POST stored (`sample`, the headers column of a real row): the same keys, fresh values for
 * the per-request ones (trace context, correlation id), so the row size matches.
 */
function headersLike(sample: Record<string, string>, newId: () => string): string {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(sample)) {
    if (k === 'traceparent') out[k] = `00-${hex(16)}-${hex(8)}-01`;
    else if (k === 'correlationId') out[k] = newId();
    else out[k] = v;
  }
  return JSON.stringify(out);
}

/**
 * Inserts `n` pending `order.placed.v1` rows, `chunk` per transaction, with occurred_at = the time of their chunk.
 * `sampleHeaders` is the headers column of a row the service wrote (so the headers are as large); the first event of
 * every chunk goes through the registry and the rows are marked validated, as appendToOutbox marks its own. Returns the time
 * taken and the payload size.
 */
export async function insertPendingOrders(
  client: Client,
  n: number,
  options: { chunk?: number; sampleHeaders?: string; onChunk?: (p: BacklogProgress) => void; shouldStop?: () => boolean } = {},
): Promise<{ inserted: number; ms: number; avgPayloadBytes: number }> {
  const chunk = options.chunk ?? 10_000;
  const registry = registryOf(modules);
  const newId = createUuidV7();
  const sample = JSON.parse(options.sampleHeaders ?? '{}') as Record<string, string>;
  const body = orderBody();
  const totalCents = body.items.reduce((s, i) => s + i.quantity * i.unitPriceCents, 0);
  const start = performance.now();
  let inserted = 0;
  let payloadBytes = 0;
  while (inserted < n && !options.shouldStop?.()) {
    const chunkStart = performance.now();
    const size = Math.min(chunk, n - inserted);
    const now = new Date();
    const at = now.toISOString();
    // the chunk's first event goes through the registry: its JSON, exactly what appendToOutbox stores, is the
    // template of the chunk's other rows, which differ only in their ids
    const templateIds = { orderId: newId(), eventId: newId() };
    const template = JSON.stringify(
      registry.parse({
        eventId: templateIds.eventId,
        aggregateType: 'order',
        aggregateId: templateIds.orderId,
        aggregateVersion: 1,
        type: 'order.placed.v1',
        occurredAt: at,
        data: { orderId: templateIds.orderId, customerId: body.customerId, currency: body.currency, items: body.items, totalCents, placedAt: at },
      }),
    );
    const parts = template.split(templateIds.orderId).map((p) => p.split(templateIds.eventId));
    const rows: Array<[string, string, string, string, number, number]> = [];
    for (let i = 0; i < size; i++) {
      const orderId = i === 0 ? templateIds.orderId : newId();
      const eventId = i === 0 ? templateIds.eventId : newId();
      const payload = parts.map((p) => p.join(eventId)).join(orderId);
      payloadBytes += payload.length;
      rows.push([eventId, orderId, payload, headersLike(sample, newId), now.getTime(), aggregateHash('order', orderId)]);
    }
    await client.execute({ sql: INSERT_SQL, args: [JSON.stringify(rows)] });
    inserted += size;
    options.onChunk?.({ inserted, chunkMs: Math.round(performance.now() - chunkStart) });
  }
  return { inserted, ms: Math.round(performance.now() - start), avgPayloadBytes: inserted ? Math.round(payloadBytes / inserted) : 0 };
}
