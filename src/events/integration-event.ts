import { z } from 'zod';
import { safeText } from './safe-text.ts';

/** Subject-safe token: no `.`, `*`, `>`, whitespace, control characters or unpaired surrogates, at most 128 characters. */
export const SubjectToken = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[^.*>\s\p{Cc}\p{Cs}]+$/u, 'a subject-safe token (no ".", "*", ">", whitespace, control characters or unpaired surrogates)');

/** The envelope every integration event shares; `data` is checked by the registry entry for `type`. */
export const IntegrationEventEnvelope = z.strictObject({
  eventId: safeText().min(1).max(128),
  type: z.string().regex(/^[a-z0-9_-]+(\.[a-z0-9_-]+)*\.v\d+$/, 'a versioned type such as order.placed.v1'),
  aggregateType: SubjectToken,
  aggregateId: SubjectToken,
  aggregateVersion: z.number().int().positive(),
  occurredAt: z.iso.datetime({ precision: 3 }),
  data: z.unknown(),
});

/** An event as it crosses service boundaries: plain JSON of primitives. */
export type IntegrationEvent<D = unknown> = Omit<z.output<typeof IntegrationEventEnvelope>, 'data'> & { data: D };
