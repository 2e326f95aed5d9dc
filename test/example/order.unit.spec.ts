import { describe, expect, it } from 'vitest';
import { cancel, place, type Order, type PlaceOrder } from '../../src/contexts/orders/order.ts';

const placedAt = new Date('2026-01-02T03:04:05.678Z');
const cancelledAt = new Date('2026-01-03T00:00:00.000Z');

const cmd: PlaceOrder = {
  customerId: 'cust-1',
  currency: 'EUR',
  items: [
    { sku: 'a', quantity: 3, unitPriceCents: 1250 },
    { sku: 'b', quantity: 1, unitPriceCents: 499 },
    { sku: 'c', quantity: 7, unitPriceCents: 0 },
  ],
};

function placed(): Order {
  return place(cmd, { id: 'order-1', now: placedAt }).order;
}

describe('order aggregate - place', () => {
  it('computes the total as the sum of quantity × unit price over all lines', () => {
    const { order } = place(cmd, { id: 'order-1', now: placedAt });
    expect(order.totalCents).toBe(3 * 1250 + 499);
  });

  it('keeps the total an exact integer at the largest allowed order', () => {
    const items = Array.from({ length: 100 }, (_, i) => ({ sku: `s${i}`, quantity: 1000, unitPriceCents: 100_000_000 }));
    const { order } = place({ ...cmd, items }, { id: 'big', now: placedAt });
    expect(order.totalCents).toBe(100 * 1000 * 100_000_000);
    expect(Number.isSafeInteger(order.totalCents)).toBe(true);
  });

  it('starts at version 1 in status placed with the given id, time and lines', () => {
    const { order, events } = place(cmd, { id: 'order-1', now: placedAt });
    expect(order).toEqual({
      id: 'order-1',
      customerId: 'cust-1',
      currency: 'EUR',
      lines: cmd.items,
      totalCents: 4249,
      status: 'placed',
      version: 1,
      placedAt,
      cancelledAt: null,
      cancelReason: null,
    });
    expect(events).toEqual([{ kind: 'OrderPlaced', order }]);
  });

  it('copies the command lines, so a later change to the command does not alter the order', () => {
    const items = [{ sku: 'a', quantity: 1, unitPriceCents: 10 }];
    const { order } = place({ ...cmd, items }, { id: 'o', now: placedAt });
    items[0]!.quantity = 99;
    expect(order.lines[0]!.quantity).toBe(1);
  });
});

describe('order aggregate - cancel', () => {
  it('cancels a placed order, bumping the version and recording time and reason', () => {
    const before = placed();
    const decision = cancel(before, { reason: 'changed my mind' }, { now: cancelledAt });
    expect(decision.outcome).toBe('cancelled');
    if (decision.outcome !== 'cancelled') return;
    expect(decision.order).toMatchObject({
      status: 'cancelled',
      version: 2,
      cancelledAt,
      cancelReason: 'changed my mind',
      totalCents: before.totalCents,
    });
    expect(decision.events).toEqual([{ kind: 'OrderCancelled', order: decision.order, reason: 'changed my mind', cancelledAt }]);
  });

  it('does not mutate the order it decided on', () => {
    const before = placed();
    const snapshot = structuredClone(before);
    cancel(before, { reason: null }, { now: cancelledAt });
    expect(before).toEqual(snapshot);
  });

  it('cancelling twice returns already-cancelled and no events', () => {
    const first = cancel(placed(), { reason: null }, { now: cancelledAt });
    if (first.outcome !== 'cancelled') throw new Error('first cancel should succeed');
    const second = cancel(first.order, { reason: 'again' }, { now: new Date(cancelledAt.getTime() + 1000) });
    expect(second).toEqual({ outcome: 'already-cancelled' });
  });
});
