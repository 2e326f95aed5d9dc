import type { MiddlewareHandler } from 'hono';
import { bodyLimit as honoBodyLimit } from 'hono/body-limit';

/**
 * hono/body-limit, with its common case answered from the headers alone: a request with a Content-Length and no
 * Transfer-Encoding passes (or fails with `onError`) on that length, exactly as hono's middleware decides it, but
 * without touching `c.req.raw.body`. On Node that access alone makes @hono/node-server build a full undici Request
 * (URL parse, AbortSignal, Headers, a web ReadableStream over the socket) that its direct body read (`text()`,
 * `json()`) does not need: ≈ 100 µs of a ≈ 600 µs POST on a small machine. Every other request (GET and HEAD,
 * whose body hono checks first, and a streamed, chunked body) goes through hono's middleware unchanged.
 */
export function bodyLimit(options: { maxSize: number; onError: Parameters<typeof honoBodyLimit>[0]['onError'] & {} }): MiddlewareHandler {
  const streamed = honoBodyLimit(options);
  const { maxSize, onError } = options;
  return async function bodyLimitByLength(c, next) {
    const method = c.req.method;
    if (method === 'GET' || method === 'HEAD') return streamed(c, next);
    const length = c.req.header('content-length');
    if (length !== undefined && c.req.header('transfer-encoding') === undefined) return Number.parseInt(length || '0', 10) > maxSize ? onError(c) : next();
    return streamed(c, next);
  };
}
