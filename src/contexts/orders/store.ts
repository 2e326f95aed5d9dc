import { sqlOf, sqlRunner, type Database, type Tx } from '../../db/open-database.ts';
import type { Order, OrderStatus } from './order.ts';

/** Loads an order with its lines; works on the database or inside a transaction. */
export async function loadOrder(db: Database | Tx, id: string): Promise<Order | undefined> {
  const run = sqlRunner(db);
  const found = await run.execute({
    sql: 'SELECT id, customer_id, currency, status, total_cents, version, placed_at, cancelled_at, cancel_reason FROM orders WHERE id = ?',
    args: [id],
  });
  const row = found.rows[0];
  if (!row) return undefined;
  const lines = await run.execute({ sql: 'SELECT sku, quantity, unit_price_cents FROM order_lines WHERE order_id = ? ORDER BY line_no', args: [id] });
  return {
    id: String(row.id),
    customerId: String(row.customer_id),
    currency: String(row.currency),
    status: row.status as OrderStatus,
    totalCents: Number(row.total_cents),
    version: Number(row.version),
    placedAt: new Date(Number(row.placed_at)),
    cancelledAt: row.cancelled_at === null ? null : new Date(Number(row.cancelled_at)),
    cancelReason: row.cancel_reason === null ? null : String(row.cancel_reason),
    lines: lines.rows.map((l) => ({ sku: String(l.sku), quantity: Number(l.quantity), unitPriceCents: Number(l.unit_price_cents) })),
  };
}

/** Inserts a new order and its lines. Must be called inside the write transaction. */
export async function insertOrder(tx: Tx, order: Order): Promise<void> {
  const run = sqlOf(tx);
  await run.execute({
    sql: 'INSERT INTO orders (id, customer_id, currency, status, total_cents, version, placed_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
    args: [order.id, order.customerId, order.currency, order.status, order.totalCents, order.version, order.placedAt.getTime()],
  });
  await run.execute({
    sql: insertLinesSql(order.lines.length),
    args: order.lines.flatMap((l, i) => [order.id, i + 1, l.sku, l.quantity, l.unitPriceCents]),
  });
}

// one text per line count (at most the body's 100 lines), built once: the same string each time, which a statement cache can key on
const INSERT_LINES_SQL: string[] = [];
const insertLinesSql = (n: number): string =>
  (INSERT_LINES_SQL[n] ??=
    `INSERT INTO order_lines (order_id, line_no, sku, quantity, unit_price_cents) VALUES ${Array.from({ length: n }, () => '(?, ?, ?, ?, ?)').join(', ')}`);

/** Stores a cancellation, guarded by the version it was decided on. Must be called inside the write transaction. */
export async function saveCancellation(tx: Tx, order: Order): Promise<void> {
  const res = await sqlOf(tx).execute({
    sql: 'UPDATE orders SET status = ?, version = ?, cancelled_at = ?, cancel_reason = ? WHERE id = ? AND version = ?',
    args: [order.status, order.version, order.cancelledAt?.getTime() ?? null, order.cancelReason, order.id, order.version - 1],
  });
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
