import { Hono } from 'hono';
import { z } from 'zod';
import type { Deps } from '../../deps.ts';
import { NotFoundError } from '../../errors.ts';
import { safeText } from '../../events/safe-text.ts';
import { commandRoute } from '../../http/command-route.ts';
import { describeQuery } from '../../http/describe-route.ts';
import { cancelOrder } from './cancel-order.ts';
import { placeOrder } from './place-order.ts';
import { loadOrder, orderToJson } from './store.ts';

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

/** The order context's HTTP routes, mounted at /orders: one line per command, queries beside them. */
export function createOrderRoutes(deps: Deps) {
  return new Hono()
    .post('/', ...commandRoute(deps, PlaceOrderBody, placeOrder))
    .post('/:id/cancel', ...commandRoute(deps, CancelOrderBody, cancelOrder, { emptyBody: true }))
    .get('/:id', describeQuery('Read an order', { notFound: 'No order has this id.' }), async (c) => {
      const order = await loadOrder(deps.db, c.req.param('id'));
      if (!order) throw new NotFoundError(`Order ${c.req.param('id')} does not exist.`);
      return c.json(orderToJson(order));
    });
}
