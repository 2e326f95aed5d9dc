import type { Hono } from 'hono';
import { generateSpecs } from 'hono-openapi';
import { Scalar } from '@scalar/hono-api-reference';

/** What the document says about the service: its name (SERVICE_NAME) and its version (package.json, read by the entry). */
export type ApiInfo = { title: string; version: string };

/** The OpenAPI 3.1 document of a service (the JSON served at /openapi.json). */
export type ApiDocument = Awaited<ReturnType<typeof generateSpecs>>;

const OWN_PATHS = ['/openapi.json', '/docs'];

const components = {
  schemas: {
    Problem: {
      type: 'object' as const,
      description: 'RFC 9457 problem details; `type` is a tag URI naming the service and the problem code.',
      required: ['type', 'title', 'status', 'detail'],
      properties: {
        type: { type: 'string' as const, format: 'uri' },
        title: { type: 'string' as const },
        status: { type: 'integer' as const },
        detail: { type: 'string' as const },
        instance: { type: 'string' as const },
        issues: {
          type: 'array' as const,
          description: 'The body’s validation issues (400 validation only).',
          items: {
            type: 'object' as const,
            required: ['path', 'message', 'code'],
            properties: { path: { type: 'string' as const }, message: { type: 'string' as const }, code: { type: 'string' as const } },
          },
        },
      },
    },
  },
  parameters: {
    IdempotencyKey: {
      name: 'Idempotency-Key',
      in: 'header' as const,
      description: 'Runs the command once: a repeat with the same body gets the stored answer (Idempotent-Replayed: true); with another body, 422.',
      schema: { type: 'string' as const, minLength: 1, maxLength: 255, pattern: '^[\\x21-\\x7e]+$' },
    },
    Traceparent: {
      name: 'traceparent',
      in: 'header' as const,
      description:
        'W3C Trace Context (with `tracestate`): the request’s server span continues a valid value (else starts a trace), and its context travels with the command’s events (outbox rows and NATS headers).',
      schema: { type: 'string' as const, pattern: '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' },
    },
    CorrelationId: {
      name: 'X-Correlation-Id',
      in: 'header' as const,
      description: 'A correlation id that travels with the command’s events; without a valid one, the request id (X-Request-Id) does.',
      schema: { type: 'string' as const, minLength: 1, maxLength: 128 },
    },
  },
  securitySchemes: { adminToken: { type: 'http' as const, scheme: 'bearer', description: 'ADMIN_TOKEN' } },
};

const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'trace'] as const;

/**
 * The OpenAPI 3.1 document of `app`: every route it serves, described by its describe middleware (describeCommand,
 * describeQuery, describeAdmin, describeRoute) or, without one, listed with its path parameters only; each operation
 * tagged by its first path segment unless it names its tags.
 */
export async function describeApi(app: Hono<any, any, any>, info: ApiInfo): Promise<ApiDocument> {
  const description = `The HTTP API of ${info.title}. Commands take JSON and an optional Idempotency-Key; every error is RFC 9457 application/problem+json.`;
  const doc = await generateSpecs(app, {
    documentation: { info: { description, ...info }, components },
    exclude: OWN_PATHS,
    includeEmptyPaths: true,
    excludeStaticFile: false,
  });
  for (const [path, item] of Object.entries(doc.paths)) {
    const tag = path.split('/')[1] || 'service';
    for (const method of METHODS) {
      const op = item?.[method];
      if (!op) continue;
      op.tags ??= [tag];
      // a route without a describe middleware gets `200: {}`, which OpenAPI refuses (a response needs a description)
      for (const res of Object.values(op.responses ?? {})) if (!('$ref' in res) && !res.description) res.description = 'Not described.';
    }
  }
  return doc;
}

/** The API reference script /docs loads, at a pinned version. */
export const SCALAR_CDN = 'https://cdn.jsdelivr.net/npm/@scalar/api-reference@1.76.0';

/** Serves `app`'s document at GET /openapi.json (built once, on first request) and an API reference page at GET /docs. */
export function mountApiDescription(app: Hono<any, any, any>, info: ApiInfo): void {
  let doc: Promise<ApiDocument> | undefined;
  const build = () => describeApi(app, info).catch((error: unknown) => ((doc = undefined), Promise.reject(error)));
  app.get('/openapi.json', async (c) => c.json(await (doc ??= build())));
  // The page loads Scalar's script from its CDN (jsdelivr): the browser needs the internet, the service does not.
  // The version is pinned, so what runs on this origin changes only when this line does; the status page keeps its
  // admin token in memory, out of reach of this page's script.
  app.get('/docs', Scalar({ url: '/openapi.json', pageTitle: `${info.title} API`, cdn: SCALAR_CDN }));
}
