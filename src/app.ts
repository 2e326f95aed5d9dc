import { Hono } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { HTTPException } from 'hono/http-exception';
import { sql } from 'drizzle-orm';
import { describeRoute } from 'hono-openapi';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { isBusyError, isDatabaseUnreachable } from './db/busy.ts';
import type { Deps } from './deps.ts';
import { AppError, NotFoundError, ServiceUnavailableError, toProblem } from './errors.ts';
import { mountApiDescription } from './http/api-description.ts';
import type { Context } from './http/define-context.ts';
import { describeQuery, jsonResponse } from './http/describe-route.ts';
import { readOutboxStats } from './outbox/outbox-stats.ts';
import { DEFAULT_SERVICE_NAME } from './service-name.ts';

export const MAX_BODY_BYTES = 64 * 1024;

export type AppOptions = {
  /** The service's name, in problem-type URIs (default: hono-outbox). */
  service?: string;
  /** The service's version, in /openapi.json (the entries pass package.json's; default 0.0.0). */
  version?: string;
  /** The contexts whose routes the `api` role serves, each at its basePath. */
  contexts?: readonly Context[];
  /** Serve the contexts' routes (the `api` role); false leaves only the operational endpoints. */
  api?: boolean;
  /** Extra readiness facts (e.g. `{ nats: 'connected' }`); reported, they do not fail /ready. */
  readiness?: () => Record<string, string>;
  /** Mounts routes owned by other parts (metrics, admin, read models). */
  extend?: (app: Hono) => void;
};

/** Builds the HTTP app from its dependencies; Web Standard APIs only, so every runtime can serve `app.fetch`. */
export function createApp(deps: Deps, options: AppOptions = {}): Hono {
  const app = new Hono();

  app.use(
    '*',
    bodyLimit({
      maxSize: MAX_BODY_BYTES,
      onError: () => {
        throw new AppError(413, 'payload-too-large', 'Payload too large', `The body exceeds ${MAX_BODY_BYTES} bytes.`);
      },
    }),
  );

  if (options.api !== false) for (const context of options.contexts ?? []) app.route(context.basePath, context.routes(deps));

  app.get('/health', describeQuery('Liveness: the process answers'), (c) => c.json({ status: 'ok' }));

  app.get('/ready', describeReady, async (c) => {
    const facts = options.readiness?.() ?? {};
    try {
      await deps.db.run(sql`SELECT 1`);
      return c.json({ status: 'ready', database: 'ok', ...facts });
    } catch (error) {
      deps.log.warn('readiness check failed', { error: String(error) });
      return c.json({ status: 'unavailable', database: 'unavailable', ...facts }, 503);
    }
  });

  app.get('/outbox/stats', describeQuery('Outbox statistics: the backlog by status'), async (c) => c.json(await readOutboxStats(deps.db, deps.clock())));

  options.extend?.(app);
  mountApiDescription(app, { title: options.service ?? DEFAULT_SERVICE_NAME, version: options.version ?? '0.0.0' });

  app.notFound((c) => {
    const err = new NotFoundError(`No route for ${c.req.method} ${c.req.path}.`);
    return c.json(toProblem(err, c.req.path, options.service), 404, { 'Content-Type': 'application/problem+json' });
  });

  app.onError((error, c) => {
    const appError = toAppError(error);
    if (appError.status >= 500 && appError.status !== 503) {
      deps.log.error('unhandled error', { path: c.req.path, error: String(error), stack: (error as Error).stack });
    }
    return c.json(toProblem(appError, c.req.path, options.service), appError.status as ContentfulStatusCode, {
      'Content-Type': 'application/problem+json',
      ...appError.headers,
    });
  });

  return app;
}

const describeReady = describeRoute({
  summary: 'Readiness: the database answers (other facts are reported, not required)',
  responses: { 200: jsonResponse('Ready.'), 503: jsonResponse('The database cannot be reached.') },
});

function toAppError(error: unknown): AppError {
  if (error instanceof AppError) return error;
  if (isBusyError(error)) return new ServiceUnavailableError('The database is busy; retry shortly.', 1);
  if (isDatabaseUnreachable(error)) return new ServiceUnavailableError('The database cannot be reached; retry shortly.', 1);
  if (error instanceof HTTPException) {
    const title = error.status === 400 ? 'Bad request' : 'HTTP error';
    return new AppError(error.status, error.status === 400 ? 'bad-request' : 'http-error', title, error.message || title);
  }
  return new AppError(500, 'internal', 'Internal error', 'The request could not be processed.');
}
