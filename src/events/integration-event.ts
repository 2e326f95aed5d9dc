import { z } from 'zod';

/** Subject-safe token: no `.`, `*`, `>`, whitespace or control characters, at most 128 characters. */
export const SubjectToken = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[^.*>\s\p{Cc}]+$/u, 'a subject-safe token (no ".", "*", ">", whitespace or control characters)');

/** The envelope every integration event shares; `data` is checked by the registry entry for `type`. */
export const IntegrationEventEnvelope = z.strictObject({
  eventId: z.string().min(1).max(128),
  type: z.string().regex(/^[a-z0-9_-]+(\.[a-z0-9_-]+)*\.v\d+$/, 'a versioned type such as order.placed.v1'),
  aggregateType: SubjectToken,
  aggregateId: SubjectToken,
  aggregateVersion: z.number().int().positive(),
  occurredAt: z.iso.datetime({ precision: 3 }),
  data: z.unknown(),
});

/** An event as it crosses service boundaries: plain JSON of primitives. */
export type IntegrationEvent<D = unknown> = Omit<z.output<typeof IntegrationEventEnvelope>, 'data'> & { data: D };
