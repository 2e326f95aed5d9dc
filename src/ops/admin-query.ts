import { zValidator } from '@hono/zod-validator';
import { z } from 'zod';
import { ValidationError } from '../errors.ts';

/**
 * A query parameter holding a whole number from `min` to `max` in decimal digits only: no sign, spaces, point,
 * exponent or `0x`/`0b` prefix, all of which Number() would read as some other number.
 */
export function decimalParam(min: number, max = Number.MAX_SAFE_INTEGER) {
  const range = max === Number.MAX_SAFE_INTEGER ? `${min} or more` : `${min} to ${max}`;
  return z
    .string()
    .regex(/^[0-9]+$/, 'decimal digits only')
    .transform(Number)
    .pipe(z.number().int().min(min).max(max))
    .meta({ description: `A whole number, ${range}, in decimal digits.` });
}

/** `limit` of an admin listing: 1 to 1000, 100 when absent. */
export const PageLimit = decimalParam(1, 1000)
  .default(100)
  .meta({ description: 'Items per page: a whole number, 1 to 1000, in decimal digits; 100 when absent.' });

/** zod validation of the query string; failures become a 400 problem with the zod issues. */
export function validQuery<T extends z.ZodType>(schema: T) {
  return zValidator('query', schema, (result) => {
    if (!result.success) throw new ValidationError(result.error.issues, 'The query string does not match the expected shape.');
  });
}

/** A stored body as an admin answer shows it: the parsed JSON, or the text itself when it is not JSON. */
export function storedJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
