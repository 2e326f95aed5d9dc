import { z } from 'zod';
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
};

/** Builds the whitelist of integration events: one zod schema per versioned type. */
export function createEventRegistry(schemas: Record<string, z.ZodType>): EventRegistry {
  const byType = new Map(Object.entries(schemas));
  return {
    has: (type) => byType.has(type),
    types: () => [...byType.keys()],
    parse(event) {
      const type =
        typeof event === 'object' && event !== null && typeof (event as { type?: unknown }).type === 'string'
          ? (event as { type: string }).type
          : '(missing type)';
      const schema = byType.get(type);
      if (!schema) throw new UnknownEventTypeError(type);
      const envelope = IntegrationEventEnvelope.safeParse(event);
      if (!envelope.success) throw new InvalidEventError(type, envelope.error.issues);
      const data = schema.safeParse(envelope.data.data);
      if (!data.success) throw new InvalidEventError(type, data.error.issues);
      return { ...envelope.data, data: data.data };
    },
  };
}
