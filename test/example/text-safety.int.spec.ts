// The example's text fields are safeText: refused at its HTTP edge with a 400 naming the field, and by its event
// schemas. (safeText itself and the outbox's own check: test/int/text-safety.)
import { describe, expect, it } from 'vitest';
import { registryOf } from '../../src/compose/define-modules.ts';
import { InvalidEventError } from '../../src/events/registry.ts';
import { modules } from '../../src/modules.ts';
import { orderBody } from '../support/example-orders.ts';
import { expectProblem, postJson } from '../support/http.ts';
import { UNSAFE_TEXT } from '../support/unsafe-text.ts';
import { createExampleApp, orderTableCounts } from './support.ts';

const EMPTY = { orders: 0, order_lines: 0, outbox: 0, idempotency_keys: 0 };

/** Asserts a 400 validation problem whose only issue is at `path`. */
async function expectRefusedAt(res: Response, path: string): Promise<void> {
  const problem = await expectProblem(res, 400);
  expect(problem.issues?.map((i) => i.path)).toEqual([path]);
  expect(problem.issues![0]!.message).toMatch(/control characters or unpaired surrogates/);
}

describe('example orders - text that cannot be stored as sent', () => {
  it.each(UNSAFE_TEXT)(
    'a customerId with %s → 400 naming customerId, no order and no outbox row; the same id with an emoji is placed',
    async (_label, text) => {
      await using a = await createExampleApp();
      await expectRefusedAt(await postJson(a.app, '/orders', orderBody({ customerId: text })), 'customerId');
      expect(await orderTableCounts(a.client)).toEqual(EMPTY);
      expect((await postJson(a.app, '/orders', orderBody({ customerId: 'acme😀x' }))).status).toBe(201);
    },
  );

  it.each(UNSAFE_TEXT)('a sku with %s → 400 naming items.1.sku and nothing stored', async (_label, text) => {
    await using a = await createExampleApp();
    const items = [
      { sku: 'fine', quantity: 1, unitPriceCents: 100 },
      { sku: text, quantity: 1, unitPriceCents: 100 },
    ];
    await expectRefusedAt(await postJson(a.app, '/orders', orderBody({ items })), 'items.1.sku');
    expect(await orderTableCounts(a.client)).toEqual(EMPTY);
  });

  it.each(UNSAFE_TEXT)('a cancel reason with %s → 400 naming reason; the order stays placed with only its placed event', async (_label, text) => {
    await using a = await createExampleApp();
    const { orderId } = (await (await postJson(a.app, '/orders', orderBody())).json()) as { orderId: string };
    await expectRefusedAt(await postJson(a.app, `/orders/${orderId}/cancel`, { reason: text }), 'reason');
    expect(await (await a.app.request(`/orders/${orderId}`)).json()).toMatchObject({ status: 'placed', version: 1 });
    expect(await orderTableCounts(a.client)).toEqual({ orders: 1, order_lines: 2, outbox: 1, idempotency_keys: 0 });
  });
});

describe('example orders - its event schemas refuse such text, so no subscriber applies it', () => {
  const at = '2026-03-01T10:00:00.000Z';
  const envelope = { eventId: 'e-1', aggregateType: 'order', aggregateId: 'o-1', aggregateVersion: 1, occurredAt: at };
  const placed = (data: Record<string, unknown>) => ({
    ...envelope,
    type: 'order.placed.v1',
    data: { orderId: 'o-1', customerId: 'c', currency: 'EUR', items: [{ sku: 's', quantity: 1, unitPriceCents: 1 }], totalCents: 1, placedAt: at, ...data },
  });
  const cancelled = (data: Record<string, unknown>) => ({
    ...envelope,
    type: 'order.cancelled.v1',
    aggregateVersion: 2,
    data: { orderId: 'o-1', customerId: 'c', reason: null, totalCents: 1, cancelledAt: at, ...data },
  });

  it.each([
    ['order.placed.v1 customerId with a NUL', placed({ customerId: 'acme\u0000x' }), 'customerId'],
    ['order.placed.v1 sku with a lone surrogate', placed({ items: [{ sku: 's\ud800', quantity: 1, unitPriceCents: 1 }] }), 'items'],
    ['order.placed.v1 orderId with DEL', placed({ orderId: 'o\u007f' }), 'orderId'],
    ['order.cancelled.v1 customerId with a NUL', cancelled({ customerId: 'acme\u0000x' }), 'customerId'],
    ['order.cancelled.v1 reason with a C1 control', cancelled({ reason: 'why\u0085' }), 'reason'],
  ])('%s is an invalid event', (_label, event, field) => {
    const registry = registryOf(modules);
    expect(() => registry.parse(event)).toThrow(InvalidEventError);
    expect(() => registry.parse(event)).toThrow(field);
  });
});
