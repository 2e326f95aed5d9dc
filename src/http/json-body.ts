import type { MiddlewareHandler } from 'hono';
import { AppError, ValidationError } from '../errors.ts';
import type { z } from 'zod';
import { zValidator } from '@hono/zod-validator';

const JSON_TYPE = /^application\/([\w.-]+\+)?json$/i;

class UnsupportedMediaTypeError extends AppError {
  constructor() {
    super(415, 'unsupported-media-type', 'Unsupported media type', 'The request body must be application/json.', {}, { Accept: 'application/json' });
  }
}

/** Rejects a body that is not JSON with 415; `allowEmpty` lets a body-less request through (as `{}`). */
export function requireJson(options: { allowEmpty?: boolean } = {}): MiddlewareHandler {
  return async function requireJsonBody(c, next) {
    const type = (c.req.header('Content-Type') ?? '').split(';')[0]!.trim();
    if (JSON_TYPE.test(type)) {
      // an empty JSON body on a route whose body is optional means `{}`, as no body at all does
      if (options.allowEmpty && (await c.req.text()).trim() === '') (c.req.bodyCache as Record<string, unknown>).text = Promise.resolve('{}');
      return next();
    }
    const length = c.req.header('Content-Length');
    const empty = type === '' && (length === undefined || length === '0') && !c.req.header('Transfer-Encoding');
    if (options.allowEmpty && empty) return next();
    throw new UnsupportedMediaTypeError();
  };
}

/** zod validation of the JSON body; failures become a 400 problem with the zod issues. */
export function validJson<T extends z.ZodType>(schema: T) {
  return zValidator('json', schema, (result) => {
    if (!result.success) throw new ValidationError(result.error.issues);
  });
}
