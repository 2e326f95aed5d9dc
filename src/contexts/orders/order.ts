// The Order aggregate: pure decisions over plain data. No database, broker or HTTP here.

export type OrderLine = { sku: string; quantity: number; unitPriceCents: number };
export type OrderStatus = 'placed' | 'cancelled';

export type Order = {
  id: string;
  customerId: string;
  currency: string;
  lines: OrderLine[];
  totalCents: number;
  status: OrderStatus;
  /** Bumped by every event; becomes the integration event's aggregateVersion. */
  version: number;
  placedAt: Date;
  cancelledAt: Date | null;
  cancelReason: string | null;
};

export type OrderPlaced = { kind: 'OrderPlaced'; order: Order };
export type OrderCancelled = {
  kind: 'OrderCancelled';
  order: Order;
  reason: string | null;
  cancelledAt: Date;
};
export type OrderEvent = OrderPlaced | OrderCancelled;

export type PlaceOrder = { customerId: string; currency: string; items: OrderLine[] };

/** Decides a new order: computes the total and returns the placed state with its OrderPlaced event. */
export function place(cmd: PlaceOrder, ctx: { id: string; now: Date }): { order: Order; events: OrderEvent[] } {
  const totalCents = cmd.items.reduce((sum, l) => sum + l.quantity * l.unitPriceCents, 0);
  const order: Order = {
    id: ctx.id,
    customerId: cmd.customerId,
    currency: cmd.currency,
    lines: cmd.items.map((l) => ({ ...l })),
    totalCents,
    status: 'placed',
    version: 1,
    placedAt: ctx.now,
    cancelledAt: null,
    cancelReason: null,
  };
  return { order, events: [{ kind: 'OrderPlaced', order }] };
}

/** Decides a cancellation; an already cancelled order is an expected outcome, returned rather than thrown. */
export function cancel(
  current: Order,
  cmd: { reason: string | null },
  ctx: { now: Date },
): { outcome: 'cancelled'; order: Order; events: OrderEvent[] } | { outcome: 'already-cancelled' } {
  if (current.status === 'cancelled') return { outcome: 'already-cancelled' };
  const order: Order = {
    ...current,
    status: 'cancelled',
    version: current.version + 1,
    cancelledAt: ctx.now,
    cancelReason: cmd.reason,
  };
  return { outcome: 'cancelled', order, events: [{ kind: 'OrderCancelled', order, reason: cmd.reason, cancelledAt: ctx.now }] };
}
