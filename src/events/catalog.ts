import { orderEventSchemas } from '../orders/order-events.ts';
import { createEventRegistry, type EventRegistry } from './registry.ts';

/** The service's event registry: add one entry per new event type (and a new entry for each new version). */
export function createAppRegistry(): EventRegistry {
  return createEventRegistry({ ...orderEventSchemas });
}
