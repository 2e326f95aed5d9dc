// What a runtime's HTTP server hands the app is a Request whose URL it built from the Host header and the request
// target. Node's adapter refuses a Host it cannot make that URL of; Deno and Bun build one anyway (Deno turns
// `Host: x/metrics?` into http://x/metrics?/orders/1, a request for /metrics) or give a bare path (Bun, with no or a
// bad Host). This check gives them Node's answers, so the route is always the request target's.
import { type AppError, BadRequestError, toProblem } from '../errors.ts';

type Fetch = (request: Request, ...rest: never[]) => Response | Promise<Response>;

/**
 * A host name with a letter in it and a port of four or five digits: what needs no further check. An address of
 * digits and dots goes through the URL parser, which refuses 1.2.3.256 and 4294967296.
 */
const PLAIN_HOST = /^(?=[^:]*[a-z_-])[a-z0-9._-]+(?::(?:[1-5]\d{3,4}|[6-9]\d{3}))?$/;

/**
 * True when `host` (a Host header) names a host, with an optional port, and nothing else: the URL made of it has that
 * host name. Userinfo (`a@b`), a path, query or fragment (`x/metrics?`) or a bad port make it false.
 */
export function isHostHeader(host: string): boolean {
  if (PLAIN_HOST.test(host)) return true;
  let url: URL;
  try {
    url = new URL(`http://${host}/`);
  } catch {
    return false;
  }
  const name = host.startsWith('[') ? host.slice(0, host.indexOf(']') + 1) : host.replace(/:\d*$/, '');
  return url.hostname === name.toLowerCase() && url.pathname === '/' && url.search === '' && url.hash === '';
}

/** `problem` as a problem+json Response without `instance`: for what is answered before the app (no path to trust). */
export function problemResponse(problem: AppError, service: string): Response {
  return new Response(JSON.stringify(toProblem(problem, undefined, service)), {
    status: problem.status,
    headers: { 'Content-Type': 'application/problem+json' },
  });
}

/** The error a request no URL can be made of is answered with. */
export const badRequestTarget = () => new BadRequestError('The request target or Host header does not form a valid URL.');

/**
 * Wraps a runtime's `fetch` handler (Deno.serve, Bun.serve): a request whose Host header is no host gets a 400
 * problem+json (as Node's adapter answers it) and never reaches the app; a request the runtime gave a bare path
 * (no Host header) gets an absolute URL on the Host or, without one, on `fallbackHost`.
 */
export function guardRequestTarget<F extends Fetch>(fetch: F, options: { fallbackHost: string; service: string }): F {
  const fallback = options.fallbackHost.includes(':') && !options.fallbackHost.startsWith('[') ? `[${options.fallbackHost}]` : options.fallbackHost;
  // the last Host that passed: a server sees the same one request after request, so it is checked once
  let accepted = '';
  const guarded = (request: Request, ...rest: never[]) => {
    const host = request.headers.get('host');
    if (host !== null && host !== '' && host !== accepted) {
      if (!isHostHeader(host)) return problemResponse(badRequestTarget(), options.service);
      accepted = host;
    }
    if (request.url.startsWith('/')) return fetch(new Request(`http://${host || fallback}${request.url}`, request), ...rest);
    return fetch(request, ...rest);
  };
  return guarded as F;
}

/**
 * True for the TypeError `new Request()` throws for a URL it will not take (one the URL parser refuses, or one with a
 * user): Node's adapter builds the Request only when the app first reads it, so a Host its quick check lets through
 * (1.2.3.256) or an absolute-form target with a user (http://a@x/health) fails there, inside the app.
 */
export const isUnbuildableRequest = (error: unknown): boolean =>
  error instanceof TypeError && /^(Failed to parse URL from |Request cannot be constructed from a URL that includes credentials)/.test(error.message);
