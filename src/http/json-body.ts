import type { MiddlewareHandler } from 'hono';
import { AppError, BadRequestError, ValidationError } from '../errors.ts';
import type { z } from 'zod';
import { zValidator } from '@hono/zod-validator';
import { unreadableBody } from './body-limit.ts';

const JSON_TYPE = /^application\/([\w.-]+\+)?json$/i;

class UnsupportedMediaTypeError extends AppError {
  constructor() {
    super(415, 'unsupported-media-type', 'Unsupported media type', 'The request body must be application/json.', {}, { Accept: 'application/json' });
  }
}

/** A body sent with a content coding (gzip …): this service reads bodies as they are, so it says which it accepts. */
class UnsupportedContentCodingError extends AppError {
  constructor(coding: string) {
    super(
      415,
      'unsupported-content-coding',
      'Unsupported content coding',
      `The request body must not be content-encoded (Content-Encoding: ${coding}); send it as it is.`,
      {},
      { 'Accept-Encoding': 'identity' },
    );
  }
}

/** A body sent with a transfer coding other than chunked, which the server hands over still encoded. */
class UnsupportedTransferCodingError extends AppError {
  constructor(coding: string) {
    super(
      501,
      'unsupported-transfer-coding',
      'Unsupported transfer coding',
      `Transfer-Encoding ${coding} is not supported; send the body as it is or chunked.`,
    );
  }
}

/** Codings a header lists (`gzip, chunked`), lower-cased, without parameters. */
const codings = (value: string | undefined) =>
  value === undefined
    ? []
    : value
        .split(',')
        .map((c) => c.split(';')[0]!.trim().toLowerCase())
        .filter((c) => c !== '');

/** JSON must be UTF-8 (RFC 8259): bytes that are not are refused, not read with U+FFFD in their place. */
const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Rejects a body that is not JSON with 415, one with a content coding with 415 (Accept-Encoding: identity), one with a
 * transfer coding other than chunked with 501, and JSON whose bytes are not UTF-8 with 400; `allowEmpty` lets a
 * body-less request through (as `{}`). The body read here is what the validator parses.
 */
export function requireJson(options: { allowEmpty?: boolean } = {}): MiddlewareHandler {
  return async function requireJsonBody(c, next) {
    const contentCoding = codings(c.req.header('Content-Encoding')).filter((coding) => coding !== 'identity');
    if (contentCoding.length > 0) throw new UnsupportedContentCodingError(contentCoding.join(', '));
    const transferCoding = codings(c.req.header('Transfer-Encoding')).filter((coding) => coding !== 'chunked');
    if (transferCoding.length > 0) throw new UnsupportedTransferCodingError(transferCoding.join(', '));
    const type = (c.req.header('Content-Type') ?? '').split(';')[0]!.trim();
    if (JSON_TYPE.test(type)) {
      let bytes: ArrayBuffer;
      try {
        bytes = await c.req.arrayBuffer();
      } catch (error) {
        // hono's body limit ends a streamed body with its own error and answers 413 for it
        if (error instanceof Error && error.name === 'BodyLimitError') throw error;
        // the client went away mid-body (or sent a broken chunked encoding): its request, not a server error
        throw unreadableBody();
      }
      let text: string;
      try {
        text = strictUtf8.decode(bytes);
      } catch {
        throw new BadRequestError('The request body is not valid UTF-8, which JSON must be.');
      }
      // an empty JSON body on a route whose body is optional means `{}`, as no body at all does
      if (options.allowEmpty && text.trim() === '') text = '{}';
      (c.req.bodyCache as Record<string, unknown>).text = Promise.resolve(text);
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
