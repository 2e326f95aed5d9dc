import { Hono } from 'hono';
import { z } from 'zod';
import type { Deps } from '../deps.ts';
import { safeText } from '../events/safe-text.ts';
import { ConflictError, NotFoundError } from '../errors.ts';
import { readIdempotencyKey, runIdempotent, sendCommandResponse } from '../http/idempotency.ts';
import { requireJson, validJson } from '../http/json-body.ts';
import { outboxHeadersFrom } from '../http/trace-headers.ts';
import { cancelOrder } from './cancel-order.ts';
import { loadOrder, orderToJson } from './order-store.ts';
import { placeOrder } from './place-order.ts';

/** Body of POST /orders; the limits keep every total a safe integer. */
export const PlaceOrderBody = z.strictObject({
  customerId: safeText().min(1).max(64),
  currency: z.string().regex(/^[A-Z]{3}$/, 'three upper-case letters (ISO 4217)'),
  items: z
    .array(
      z.strictObject({
        sku: safeText().min(1).max(64),
        quantity: z.number().int().min(1).max(1000),
        unitPriceCents: z.number().int().min(0).max(100_000_000),
      }),
    )
    .min(1)
    .max(100),
});

/** Body of POST /orders/:id/cancel; an empty body means no reason. */
export const CancelOrderBody = z.strictObject({ reason: safeText().max(500).optional() });

/** The order context's HTTP routes; commands commit state + outbox rows, then wake the relay. */
export function createOrderRoutes(deps: Deps): Hono {
  const app = new Hono();

  app.post('/', requireJson(), validJson(PlaceOrderBody), async (c) => {
    const body = c.req.valid('json');
    const key = await readIdempotencyKey(c, body);
    const headers = outboxHeadersFrom(c);
    const res = await deps.writer.write((tx) =>
      runIdempotent(tx, key, deps.clock(), async () => {
        const order = await placeOrder(tx, deps, body, headers);
        return {
          status: 201,
          location: `/orders/${order.id}`,
          body: {
            orderId: order.id,
            status: order.status,
            totalCents: order.totalCents,
            currency: order.currency,
            placedAt: order.placedAt.toISOString(),
          },
        };
      }),
    );
    if (!('problem' in res) && !res.replayed) deps.outboxCommitted.notify();
    return sendCommandResponse(c, res);
  });

  app.get('/:id', async (c) => {
    const order = await loadOrder(deps.db, c.req.param('id'));
    if (!order) throw new NotFoundError(`Order ${c.req.param('id')} does not exist.`);
    return c.json(orderToJson(order));
  });

  app.post('/:id/cancel', requireJson({ allowEmpty: true }), validJson(CancelOrderBody), async (c) => {
    const body = c.req.valid('json');
    const orderId = c.req.param('id');
    const key = await readIdempotencyKey(c, body);
    const headers = outboxHeadersFrom(c);
    const res = await deps.writer.write((tx) =>
      runIdempotent(tx, key, deps.clock(), async () => {
        const r = await cancelOrder(tx, deps, { orderId, reason: body.reason ?? null }, headers);
        // Refusals are values: thrown inside the writer, they would roll back every command grouped with this one.
        if (r.outcome === 'not-found') return { problem: new NotFoundError(`Order ${orderId} does not exist.`) };
        if (r.outcome === 'already-cancelled') return { problem: new ConflictError(`Order ${orderId} is already cancelled.`) };
        return { status: 200, body: { orderId, status: r.order.status } };
      }),
    );
    if (!('problem' in res) && !res.replayed) deps.outboxCommitted.notify();
    return sendCommandResponse(c, res);
  });

  return app;
}
