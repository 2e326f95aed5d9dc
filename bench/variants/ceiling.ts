// Variant (a), the HTTP ceiling: the same POST /orders validation (JSON content type + the zod body schema)
// and a 201 answer of the same shape, with no database and no broker.
import { Hono } from 'hono';
import { requireJson, validJson } from '../../src/http/json-body.ts';
import { PlaceOrderBody } from '../../src/contexts/orders/routes.ts';

/** A Hono app whose POST /orders validates like the real one and answers without storing anything. */
export function createCeilingApp(newId: () => string): Hono {
  const app = new Hono();
  app.get('/health', (c) => c.json({ status: 'ok' }));
  app.post('/orders', requireJson(), validJson(PlaceOrderBody), (c) => {
    const body = c.req.valid('json');
    const orderId = newId();
    const totalCents = body.items.reduce((s, l) => s + l.quantity * l.unitPriceCents, 0);
    c.header('Location', `/orders/${orderId}`);
    return c.json({ orderId, status: 'placed', totalCents, currency: body.currency, placedAt: new Date().toISOString() }, 201);
  });
  return app;
}
