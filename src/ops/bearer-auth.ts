import type { MiddlewareHandler } from 'hono';
import { bearerAuth } from 'hono/bearer-auth';
import { ConfigError } from '../config.ts';
import { UnauthorizedError } from '../errors.ts';

/** What hono/bearer-auth accepts after `Bearer ` (RFC 6750 b64token); a token outside it could never match. */
const TOKEN_SYNTAX = /^[A-Za-z0-9._~+/-]+=*$/;

/**
 * Requires `Authorization: Bearer <token>` (hono/bearer-auth: hashed, constant-time comparison). A missing,
 * malformed or wrong one throws UnauthorizedError, which app.onError answers as a 401 problem with
 * `WWW-Authenticate: Bearer`. Throws ConfigError at once for a token no header could carry.
 */
export function requireBearer(token: string): MiddlewareHandler {
  if (!TOKEN_SYNTAX.test(token)) throw new ConfigError('ADMIN_TOKEN must be letters, digits and . _ ~ + / - (then any = padding), as a bearer token is');
  const refuse = (): never => {
    throw new UnauthorizedError();
  };
  return bearerAuth({
    token,
    noAuthenticationHeader: { message: refuse },
    invalidAuthenticationHeader: { message: refuse },
    invalidToken: { message: refuse },
  });
}
