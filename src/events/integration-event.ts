import { z } from 'zod';

/** Subject-safe token: no `.`, `*`, `>`, whitespace, control characters or unpaired surrogates, at most 128 characters. */
export const SubjectToken = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[^.*>\s\p{Cc}\p{Cs}]+$/u, 'a subject-safe token (no ".", "*", ">", whitespace, control characters or unpaired surrogates)');

/**
 * An event id: safe text (see safe-text.ts) that neither starts nor ends with whitespace. It is the message's
 * Nats-Msg-Id, whose value the broker trims: " e1" and "e1" would be one message to its deduplication.
 */
const EVENT_ID = /^[^\p{Cc}\p{Cs}\s](?:[^\p{Cc}\p{Cs}]*[^\p{Cc}\p{Cs}\s])?$/u;

/** The envelope every integration event shares; `data` is checked by the registry entry for `type`. */
export const IntegrationEventEnvelope = z.strictObject({
  eventId: z.string().min(1).max(128).regex(EVENT_ID, 'text without control characters, unpaired surrogates, or whitespace at either end'),
  type: z.string().regex(/^[a-z0-9_-]+(\.[a-z0-9_-]+)*\.v\d+$/, 'a versioned type such as order.placed.v1'),
  aggregateType: SubjectToken,
  aggregateId: SubjectToken,
  aggregateVersion: z.number().int().positive(),
  occurredAt: z.iso.datetime({ precision: 3 }),
  data: z.unknown(),
});

/** An event as it crosses service boundaries: plain JSON of primitives. */
export type IntegrationEvent<D = unknown> = Omit<z.output<typeof IntegrationEventEnvelope>, 'data'> & { data: D };
