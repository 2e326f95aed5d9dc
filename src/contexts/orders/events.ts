import { z } from 'zod';
import { defineEvents } from '../../events/define-events.ts';
import type { IntegrationEvent } from '../../events/integration-event.ts';
import { safeText } from '../../events/safe-text.ts';
import type { OrderEvent } from './order.ts';

const Cents = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);
const IsoTime = z.iso.datetime({ precision: 3 });

/** Data of `order.placed.v1`. Published contract: change it only by adding a `.v2`. */
export const OrderPlacedV1 = z.strictObject({
  orderId: safeText().min(1),
  customerId: safeText().min(1).max(64),
  currency: z.string().regex(/^[A-Z]{3}$/),
  items: z.array(z.strictObject({ sku: safeText().min(1).max(64), quantity: z.number().int().min(1), unitPriceCents: Cents })).min(1),
  totalCents: Cents,
  placedAt: IsoTime,
});
export type OrderPlacedV1 = z.output<typeof OrderPlacedV1>;

/** Data of `order.cancelled.v1`; carries customer and total so subscribers need no lookup. */
export const OrderCancelledV1 = z.strictObject({
  orderId: safeText().min(1),
  customerId: safeText().min(1).max(64),
  reason: safeText().max(500).nullable(),
  totalCents: Cents,
  cancelledAt: IsoTime,
});
export type OrderCancelledV1 = z.output<typeof OrderCancelledV1>;

export const ORDER_AGGREGATE = 'order';

/** The events the order context publishes: its registry entries (the contract subscribers are typed from). */
export const orderEvents = defineEvents({
  'order.placed.v1': { aggregate: ORDER_AGGREGATE, data: OrderPlacedV1 },
  'order.cancelled.v1': { aggregate: ORDER_AGGREGATE, data: OrderCancelledV1 },
});

/** Maps the aggregate's domain events to integration events (plain JSON), one fresh id each. */
export function toOrderIntegrationEvents(events: OrderEvent[], newId: () => string): IntegrationEvent[] {
  return events.map((e): IntegrationEvent => {
    const base = {
      eventId: newId(),
      aggregateType: ORDER_AGGREGATE,
      aggregateId: e.order.id,
      aggregateVersion: e.order.version,
    };
    switch (e.kind) {
      case 'OrderPlaced':
        return {
          ...base,
          type: 'order.placed.v1',
          occurredAt: e.order.placedAt.toISOString(),
          data: {
            orderId: e.order.id,
            customerId: e.order.customerId,
            currency: e.order.currency,
            items: e.order.lines.map((l) => ({ sku: l.sku, quantity: l.quantity, unitPriceCents: l.unitPriceCents })),
            totalCents: e.order.totalCents,
            placedAt: e.order.placedAt.toISOString(),
          } satisfies OrderPlacedV1,
        };
      case 'OrderCancelled':
        return {
          ...base,
          type: 'order.cancelled.v1',
          occurredAt: e.cancelledAt.toISOString(),
          data: {
            orderId: e.order.id,
            customerId: e.order.customerId,
            reason: e.reason,
            totalCents: e.order.totalCents,
            cancelledAt: e.cancelledAt.toISOString(),
          } satisfies OrderCancelledV1,
        };
    }
  });
}
