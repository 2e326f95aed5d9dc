// The API description: /openapi.json is a valid OpenAPI 3.1 document (checked by a real validator) describing every
// route the service serves, a command route is described by commandRoute alone, /docs renders it, and the contexts'
// types give a typed hono/client. Run on the fixture service, with its subscriber's read routes and the admin routes.
import { hc } from 'hono/client';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.ts';
import type { ApiOf } from '../../src/http/api-type.ts';
import { silentLogger } from '../../src/logger.ts';
import { createApiRole } from '../../src/roles/api.ts';
import { createRoleDeps } from '../../src/roles/shared.ts';
import { createTestDb } from '../support/db.ts';
import type { accountsContext } from '../support/fixture/accounts/context.ts';
import { fixtureModules } from '../support/fixture/modules.ts';
import { balances } from '../support/fixture/subscribers/balances/subscriber.ts';
import { expectValidOpenApi, fetchApiDocument, undocumentedRoutes } from '../support/openapi.ts';

type Operation = {
  summary?: string;
  tags?: string[];
  security?: unknown[];
  parameters?: Array<{ $ref?: string; name?: string; in?: string; required?: boolean }>;
  requestBody?: { required?: boolean; content: Record<string, { schema: { properties?: Record<string, { maxLength?: number }>; required?: string[] } }> };
  responses: Record<string, { content?: Record<string, unknown>; headers?: Record<string, unknown> }>;
};

/** The fixture service's app as a process with the api and consumers roles serves it, admin routes on. */
async function createFixtureService() {
  const t = await createTestDb();
  const config = parseConfig({ SERVICE_NAME: 'fixture-bank', ADMIN_TOKEN: 'test-admin-token-0123456789' });
  const shared = createRoleDeps(t.deps.db, { modules: fixtureModules, log: silentLogger });
  const routes = [{ basePath: balances.basePath!, routes: balances.routes!(t.deps.db) }];
  const { app } = createApiRole(config, shared, { readiness: () => ({}), routes, version: '1.2.3' });
  return Object.assign(t, { app });
}

const operation = (doc: { paths: Record<string, unknown> }, path: string, method: string) => (doc.paths[path] as Record<string, Operation>)[method]!;

describe('openapi - /openapi.json describes the service', () => {
  it('is a valid OpenAPI 3.1 document titled with SERVICE_NAME and versioned with the version given', async () => {
    await using s = await createFixtureService();
    const doc = await fetchApiDocument(s.app);
    await expectValidOpenApi(doc);
    expect(doc.info).toMatchObject({ title: 'fixture-bank', version: '1.2.3' });
  });

  it('lists every route the app serves, and describes commands, queries, a subscriber’s read routes, operations and admin', async () => {
    await using s = await createFixtureService();
    const doc = await fetchApiDocument(s.app);
    expect(undocumentedRoutes(s.app, doc)).toEqual([]);
    const described = [
      ['/accounts', 'post'],
      ['/accounts/{id}', 'get'],
      ['/accounts/{id}/close', 'post'],
      ['/accounts/{id}/deposit', 'post'],
      ['/admin/outbox/failed', 'get'],
      ['/admin/outbox/failed/retry-all', 'post'],
      ['/admin/outbox/failed/{id}/retry', 'post'],
      ['/balances/{owner}', 'get'],
      ['/health', 'get'],
      ['/metrics', 'get'],
      ['/outbox/stats', 'get'],
      ['/ready', 'get'],
    ] as const;
    for (const [path, method] of described) {
      const op = operation(doc, path, method);
      expect(op.summary, `${method} ${path}`).toBeTruthy();
      expect(op.responses['200'], `${method} ${path}`).toBeDefined();
    }
  });

  it('describes a command route from commandRoute alone: the zod body, the headers and every answer', async () => {
    await using s = await createFixtureService();
    const doc = await fetchApiDocument(s.app);
    const open = operation(doc, '/accounts', 'post');
    expect(open.summary).toBe('Open account');
    expect(open.tags).toEqual(['accounts']);
    const body = open.requestBody!;
    expect(body.required).toBe(true);
    expect(body.content['application/json']!.schema).toMatchObject({ required: ['owner'], properties: { owner: { maxLength: 64 } } });
    expect(open.parameters!.map((p) => p.$ref)).toEqual([
      '#/components/parameters/IdempotencyKey',
      '#/components/parameters/Traceparent',
      '#/components/parameters/CorrelationId',
    ]);
    expect(doc.components.parameters).toMatchObject({
      IdempotencyKey: { name: 'Idempotency-Key', in: 'header' },
      Traceparent: { name: 'traceparent', in: 'header' },
    });
    for (const status of ['400', '404', '409', '413', '415', '422', '503']) {
      expect(open.responses[status]!.content).toEqual({ 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } });
    }
    expect(open.responses['201']!.headers).toHaveProperty('Location');

    const close = operation(doc, '/accounts/{id}/close', 'post');
    expect(close.requestBody!.required).toBe(false);
    expect(close.parameters).toContainEqual(expect.objectContaining({ name: 'id', in: 'path', required: true }));
  });

  it('puts the admin routes behind the bearer scheme, with their 401 problem', async () => {
    await using s = await createFixtureService();
    const doc = await fetchApiDocument(s.app);
    expect(doc.components.securitySchemes).toEqual({ adminToken: expect.objectContaining({ type: 'http', scheme: 'bearer' }) });
    for (const [path, method] of [
      ['/admin/outbox/failed', 'get'],
      ['/admin/outbox/failed/retry-all', 'post'],
      ['/admin/outbox/failed/{id}/retry', 'post'],
    ] as const) {
      const op = operation(doc, path, method);
      expect(op.security).toEqual([{ adminToken: [] }]);
      expect(op.responses['401']).toBeDefined();
    }
    expect(operation(doc, '/health', 'get').security).toBeUndefined();
  });

  it('serves /docs, an API reference page reading /openapi.json', async () => {
    await using s = await createFixtureService();
    const res = await s.app.request('/docs');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    const html = await res.text();
    expect(html).toContain('/openapi.json');
    expect(html).toMatch(/@scalar\/api-reference@\d+\.\d+\.\d+/); // a pinned script, not whatever the CDN serves today
  });
});

type AccountsApi = ApiOf<[typeof accountsContext]>;

describe('openapi - the contexts’ type gives a typed hono/client', () => {
  it('opens, credits and reads an account through hc, its calls typed by the routes', async () => {
    await using s = await createFixtureService();
    const client = hc<AccountsApi>('http://service.test', { fetch: (input: RequestInfo | URL, init?: RequestInit) => s.app.request(input, init) });

    const opened = await client.accounts.$post({ json: { owner: 'ann' } }, { headers: { 'Idempotency-Key': 'open-ann' } });
    expect(opened.status).toBe(201);
    const { accountId } = (await opened.json()) as { accountId: string };
    expect((await client.accounts[':id'].deposit.$post({ param: { id: accountId }, json: { amountCents: 250 } })).status).toBe(200);

    const read = await client.accounts[':id'].$get({ param: { id: accountId } });
    expect(read.status).toBe(200);
    const account = await read.json();
    expect(account).toMatchObject({ accountId, owner: 'ann', balanceCents: 250 });
  });

  it('refuses, at compile time, a body or a path the routes do not have (checked by tsc)', () => {
    const client = hc<AccountsApi>('http://service.test');
    const untyped = () => {
      // @ts-expect-error owner is a string
      void client.accounts.$post({ json: { owner: 42 } });
      // @ts-expect-error deposit needs the account id
      void client.accounts[':id'].deposit.$post({ json: { amountCents: 1 } });
      // @ts-expect-error no such route
      void client.accounts.$delete();
    };
    expect(typeof untyped).toBe('function');
  });
});
