import { zValidator } from '@hono/zod-validator';
import { z } from 'zod';
import { ValidationError } from '../errors.ts';

/** `limit` of an admin listing: 1 to 1000, 100 when absent. */
export const PageLimit = z.coerce.number().int().min(1).max(1000).default(100);

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
