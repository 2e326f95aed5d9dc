import { z } from 'zod';
import type { EventCatalog } from './define-events.ts';
import { IntegrationEventEnvelope, type IntegrationEvent } from './integration-event.ts';

/** The type is not in the registry: it may not be stored, published or applied. */
export class UnknownEventTypeError extends Error {
  override readonly name = 'UnknownEventTypeError';
  constructor(readonly type: string) {
    super(`Event type ${JSON.stringify(type)} is not registered`);
  }
}

/** The event does not match its envelope or its registered data schema. */
export class InvalidEventError extends Error {
  override readonly name = 'InvalidEventError';
  constructor(
    readonly type: string,
    readonly issues: z.core.$ZodIssue[],
  ) {
    super(`Invalid ${type} event: ${z.prettifyError(new z.ZodError(issues)).replace(/\n/g, '; ')}`);
  }
}

export type EventRegistry = {
  /** True when `type` may be stored, published and applied. */
  has(type: string): boolean;
  /** Returns the event with its data parsed by the registered schema; throws UnknownEventTypeError or InvalidEventError. */
  parse(event: unknown): IntegrationEvent;
  types(): string[];
  /** The aggregate type of events of `type`; throws UnknownEventTypeError for an unregistered type. */
  aggregateOf(type: string): string;
  /** The catalog the registry was built from (schemas by type), e.g. to describe the events. */
  catalog(): EventCatalog;
};

/**
 * Builds the whitelist of integration events from a catalog: one aggregate type and one zod schema of `data` per
 * versioned type. `parse` also refuses an event whose aggregateType is not the one its type belongs to.
 */
export function createEventRegistry(catalog: EventCatalog): EventRegistry {
  const byType = new Map(Object.entries(catalog));
  return {
    has: (type) => byType.has(type),
    types: () => [...byType.keys()],
    catalog: () => catalog,
    aggregateOf(type) {
      const def = byType.get(type);
      if (!def) throw new UnknownEventTypeError(type);
      return def.aggregate;
    },
    parse(event) {
      const type =
        typeof event === 'object' && event !== null && typeof (event as { type?: unknown }).type === 'string'
          ? (event as { type: string }).type
          : '(missing type)';
      const def = byType.get(type);
      if (!def) throw new UnknownEventTypeError(type);
      const envelope = IntegrationEventEnvelope.safeParse(event);
      if (!envelope.success) throw new InvalidEventError(type, envelope.error.issues);
      if (envelope.data.aggregateType !== def.aggregate) {
        throw new InvalidEventError(type, [
          { code: 'custom', path: ['aggregateType'], message: `must be ${JSON.stringify(def.aggregate)} for ${type}`, input: envelope.data.aggregateType },
        ]);
      }
      const data = def.data.safeParse(envelope.data.data);
      if (!data.success) throw new InvalidEventError(type, data.error.issues);
      return { ...envelope.data, data: data.data };
    },
  };
}
