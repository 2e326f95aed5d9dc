import type { Context } from 'hono';
import { matchedRoutes } from 'hono/route';

/** The `route` label of a request no route matched (a 404): raw paths would make one series per URL. */
export const UNMATCHED = 'unmatched';

const KNOWN_METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'CONNECT', 'TRACE']);

/**
 * The route pattern the request was matched to (`/accounts/:id/deposit`), or undefined when no route matched it. A
 * middleware (`app.use`, method ALL) is not a route: the route is the first handler registered for a method.
 */
export function routeOf(c: Context): string | undefined {
  return matchedRoutes(c).find((r) => r.method !== 'ALL')?.path;
}

/** The request's method, or `_OTHER` for one HTTP does not define (as the OpenTelemetry conventions say), so labels stay bounded. */
export function methodOf(c: Context): string {
  const method = c.req.method.toUpperCase();
  return KNOWN_METHODS.has(method) ? method : '_OTHER';
}

/** `2xx` … `5xx`: the class of an HTTP status. */
export const statusClassOf = (status: number): string => `${Math.floor(status / 100)}xx`;

/** Operational endpoints polled by probes, scrapers and the status page; their access log lines are written at debug. */
export const PROBE_PATHS: ReadonlySet<string> = new Set(['/health', '/ready', '/metrics', '/status.json']);
