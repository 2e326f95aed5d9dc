import { and, asc, eq } from 'drizzle-orm';
import type { Database, Tx } from '../db/open-database.ts';
import { orderLines, orders } from '../db/schema.ts';
import type { Order } from './order.ts';

/** Loads an order with its lines; works on the database or inside a transaction. */
export async function loadOrder(db: Database | Tx, id: string): Promise<Order | undefined> {
  const row = (await db.select().from(orders).where(eq(orders.id, id)).limit(1))[0];
  if (!row) return undefined;
  const lines = await db
    .select()
    .from(orderLines)
    .where(eq(orderLines.orderId, id))
    .orderBy(asc(orderLines.lineNo));
  return {
    id: row.id,
    customerId: row.customerId,
    currency: row.currency,
    status: row.status,
    totalCents: row.totalCents,
    version: row.version,
    placedAt: new Date(row.placedAt),
    cancelledAt: row.cancelledAt === null ? null : new Date(row.cancelledAt),
    cancelReason: row.cancelReason,
    lines: lines.map((l) => ({ sku: l.sku, quantity: l.quantity, unitPriceCents: l.unitPriceCents })),
  };
}

/** Inserts a new order and its lines. Must be called inside the write transaction. */
export async function insertOrder(tx: Tx, order: Order): Promise<void> {
  await tx.insert(orders).values({
    id: order.id,
    customerId: order.customerId,
    currency: order.currency,
    status: order.status,
    totalCents: order.totalCents,
    version: order.version,
    placedAt: order.placedAt.getTime(),
  });
  await tx
    .insert(orderLines)
    .values(order.lines.map((l, i) => ({ orderId: order.id, lineNo: i + 1, ...l })));
}

/** Stores a cancellation, guarded by the version it was decided on. Must be called inside the write transaction. */
export async function saveCancellation(tx: Tx, order: Order): Promise<void> {
  const res = await tx
    .update(orders)
    .set({
      status: order.status,
      version: order.version,
      cancelledAt: order.cancelledAt?.getTime() ?? null,
      cancelReason: order.cancelReason,
    })
    .where(and(eq(orders.id, order.id), eq(orders.version, order.version - 1)));
  if (res.rowsAffected !== 1) throw new Error(`order ${order.id} changed while it was being cancelled`);
}

/** The JSON shape of an order in HTTP responses. */
export function orderToJson(o: Order) {
  return {
    orderId: o.id,
    customerId: o.customerId,
    status: o.status,
    currency: o.currency,
    items: o.lines,
    totalCents: o.totalCents,
    version: o.version,
    placedAt: o.placedAt.toISOString(),
    cancelledAt: o.cancelledAt?.toISOString() ?? null,
    cancelReason: o.cancelReason,
  };
}
