// Reading and checking a service's /openapi.json: a real OpenAPI 3.1 validator, and the routes the app serves that
// the document leaves out.
import { compileErrors, validate } from '@readme/openapi-parser';
import type { Hono } from 'hono';
import { expect } from 'vitest';
import type { ApiDocument } from '../../src/http/api-description.ts';

/** GET /openapi.json of `app` (200 and JSON, or the test fails). */
export async function fetchApiDocument(app: Pick<Hono, 'request'>): Promise<ApiDocument> {
  const res = await app.request('/openapi.json');
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  return (await res.json()) as ApiDocument;
}

/** Fails with the validator's messages unless `doc` is a valid OpenAPI 3.1 document. */
export async function expectValidOpenApi(doc: ApiDocument): Promise<void> {
  expect(doc.openapi).toBe('3.1.0');
  const result = await validate(structuredClone(doc) as never);
  expect(result.valid, result.valid ? '' : compileErrors(result)).toBe(true);
  expect(result.warnings).toEqual([]);
}

/** `METHOD /path` of every route `app` serves (OpenAPI path syntax) that `doc` does not describe; the document's own routes aside. */
export function undocumentedRoutes(app: Pick<Hono, 'routes'>, doc: ApiDocument): string[] {
  const missing = new Set<string>();
  for (const { method, path } of app.routes) {
    if (method === 'ALL' || path === '/openapi.json' || path === '/docs') continue;
    const openApiPath = path.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
    const item = doc.paths[openApiPath] as Record<string, unknown> | undefined;
    if (!item?.[method.toLowerCase()]) missing.add(`${method} ${openApiPath}`);
  }
  return [...missing];
}
