import { Hono } from 'hono';
import { hasBearerToken } from './bearer-auth.ts';
import { cacheFor } from './cache-for.ts';
import { STATUS_PAGE_HTML, STATUS_PAGE_STYLE } from './status-page.ts';
import { STATUS_PAGE_SCRIPT } from './status-page-script.ts';
import { readStatus, type StatusSources } from './status.ts';
import { describeQuery } from '../http/describe-route.ts';

/** How long one reading of the status serves every poller. */
export const STATUS_TTL_MS = 1000;

async function sha256(text: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(text)));
  return `'sha256-${btoa(String.fromCharCode(...digest))}'`;
}

/**
 * The page may run only its own inline script and style (by hash), talk only to this origin, and be framed by
 * nobody; nothing else loads.
 */
async function contentSecurityPolicy(): Promise<string> {
  const [script, style] = await Promise.all([sha256(STATUS_PAGE_SCRIPT), sha256(STATUS_PAGE_STYLE)]);
  return [
    "default-src 'none'",
    `script-src ${script}`,
    `style-src ${style}`,
    "connect-src 'self'",
    'img-src data:',
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
}

/**
 * GET / (the status page, HTML) and GET /status.json (what it shows; see readStatus), read at most once per
 * STATUS_TTL_MS however many pages poll. Both are public, like /metrics; the page's admin actions call the
 * /admin routes with the token the operator types in.
 */
export function createStatusRoutes(sources: StatusSources & { adminToken?: string | undefined }): Hono {
  const app = new Hono();
  const csp = contentSecurityPolicy();
  const status = cacheFor(STATUS_TTL_MS, () => readStatus(sources));
  app.get('/', describeQuery('Status page (HTML)'), async (c) =>
    c.html(STATUS_PAGE_HTML, 200, {
      'Content-Security-Policy': await csp,
      'X-Content-Type-Options': 'nosniff',
      'Referrer-Policy': 'no-referrer',
      'Cache-Control': 'no-store',
    }),
  );
  app.get('/status.json', describeQuery('Status: outbox, relay, subscribers and recent errors (their details with the admin token)'), async (c) => {
    const current = await status();
    // The recent errors' fields can quote event data (a failed statement, a body that is not JSON): only an operator
    // with the admin token sees them; everyone else sees when and what kind of error happened.
    const admin = await hasBearerToken(c.req.header('Authorization'), sources.adminToken);
    const errors = admin ? current.errors : current.errors.map((e) => ({ ...e, fields: {} }));
    return c.json({ ...current, errors, errorDetails: admin }, 200, { 'Cache-Control': 'no-store' });
  });
  return app;
}
