import type { MiddlewareHandler } from 'hono';
import { UnauthorizedError } from '../errors.ts';

async function digest(text: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(text)));
}

/** Requires `Authorization: Bearer <token>`, compared in constant time (hashes of equal length, no early exit). */
export function requireBearer(token: string): MiddlewareHandler {
  const expected = digest(token);
  return async function bearerAuth(c, next) {
    const header = c.req.header('Authorization') ?? '';
    const match = /^Bearer (.+)$/.exec(header);
    const [a, b] = await Promise.all([expected, digest(match?.[1] ?? '')]);
    let diff = match ? 0 : 1;
    for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
    if (diff !== 0) throw new UnauthorizedError();
    await next();
  };
}
