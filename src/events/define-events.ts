import type { z } from 'zod';
import type { IntegrationEvent } from './integration-event.ts';

/** One integration event type: the aggregate type its events belong to and the zod schema of their `data`. */
export type EventDefinition<A extends string = string, D extends z.ZodType = z.ZodType> = { aggregate: A; data: D };

/** The event types a service may store, publish and apply, by versioned type name (`order.placed.v1`). */
export type EventCatalog = Record<string, EventDefinition>;

/** Declares a catalog with its literal types kept, so handlers get `event.data` typed from the schemas. */
export function defineEvents<const C extends EventCatalog>(catalog: C): C {
  return catalog;
}

/** The event of type `T` in catalog `C`, its `data` typed by the registered schema. */
export type EventOf<C extends EventCatalog, T extends keyof C & string> = IntegrationEvent<z.output<C[T]['data']>> & { type: T };

/** The data of event type `T` in catalog `C`. */
export type DataOf<C extends EventCatalog, T extends keyof C & string> = z.output<C[T]['data']>;
