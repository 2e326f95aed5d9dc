import type { MiddlewareHandler } from 'hono';
import { timingSafeEqual } from 'hono/utils/buffer';
import { BEARER_TOKEN_SYNTAX as TOKEN_SYNTAX, ConfigError } from '../config.ts';
import { UnauthorizedError } from '../errors.ts';

/** `Bearer` (an auth scheme is case-insensitive, RFC 9110), one or more spaces, then the token. */
const BEARER_HEADER = /^bearer +(\S+)$/i;

/**
 * True when `authorization` is `Bearer <token>` for `token`: the scheme in any case, one or more spaces, then the
 * token compared hashed and in constant time. False when `token` is absent or empty. The one check behind every
 * use of the admin token (requireBearer, the status's error details), so they never disagree.
 */
export async function hasBearerToken(authorization: string | undefined, token: string | undefined): Promise<boolean> {
  if (!token || !authorization) return false;
  const sent = BEARER_HEADER.exec(authorization)?.[1];
  if (sent === undefined || !TOKEN_SYNTAX.test(sent)) return false;
  return timingSafeEqual(token, sent);
}

/**
 * Requires `Authorization: Bearer <token>` as hasBearerToken accepts it. A missing, malformed or wrong one throws
 * UnauthorizedError, which app.onError answers as a 401 problem with `WWW-Authenticate: Bearer`. Throws
 * ConfigError at once for a token no header could carry.
 */
export function requireBearer(token: string): MiddlewareHandler {
  if (!TOKEN_SYNTAX.test(token)) throw new ConfigError('ADMIN_TOKEN must be letters, digits and . _ ~ + / - (then any = padding), as a bearer token is');
  return async (c, next) => {
    if (!(await hasBearerToken(c.req.header('Authorization'), token))) throw new UnauthorizedError();
    await next();
  };
}
