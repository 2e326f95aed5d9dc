// Variants (b) and (d): the real app (createApp: body limit, problem+json errors, idempotency, group-commit
// writer) whose POST /orders stores the order WITHOUT outbox rows. (b) stops there; (d) then publishes the event
// to JetStream inline and awaits the PubAck before answering: the dual write the outbox exists to avoid.
import type { Hono } from 'hono';
import { Hono as HonoApp } from 'hono';
import { createApp } from '../../src/app.ts';
import type { Deps } from '../../src/deps.ts';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { readIdempotencyKey, runIdempotent, sendCommandResponse } from '../../src/http/idempotency.ts';
import { requireJson, validJson } from '../../src/http/json-body.ts';
import { toOrderIntegrationEvents } from '../../src/contexts/orders/events.ts';
import { place } from '../../src/contexts/orders/order.ts';
import { PlaceOrderBody } from '../../src/contexts/orders/routes.ts';
import { insertOrder } from '../../src/contexts/orders/store.ts';

/** Called after the commit with the order's integration events; its promise is awaited before the response. */
export type AfterCommit = (events: IntegrationEvent[]) => Promise<void>;

/** The service app with a POST /orders that writes state only (same transaction path minus appendToOutbox). */
export function createStateOnlyApp(deps: Deps, afterCommit?: AfterCommit): Hono {
  const orders = new HonoApp();
  orders.post('/', requireJson(), validJson(PlaceOrderBody), async (c) => {
    const body = c.req.valid('json');
    const key = await readIdempotencyKey(c, body);
    let events: IntegrationEvent[] = [];
    const res = await deps.writer.write((tx) =>
      runIdempotent(tx, key, deps.clock(), async () => {
        const decided = place(body, { id: deps.newId(), now: deps.clock() });
        await insertOrder(tx, decided.order);
        events = toOrderIntegrationEvents(decided.events, deps.newId).map((e) => deps.registry.parse(e));
        const { order } = decided;
        return {
          status: 201,
          location: `/orders/${order.id}`,
          body: { orderId: order.id, status: order.status, totalCents: order.totalCents, currency: order.currency, placedAt: order.placedAt.toISOString() },
        };
      }),
    );
    if (afterCommit && !('problem' in res) && !res.replayed) await afterCommit(events);
    return sendCommandResponse(c, res);
  });
  return createApp(deps, { api: false, extend: (app) => app.route('/orders', orders) });
}
