// The example service's API description: its contexts and its reporting subscriber's read routes make a valid
// OpenAPI 3.1 document listing every route (the core's suite, test/int/openapi.int.spec.ts, covers the rest).
import { hc } from 'hono/client';
import { describe, expect, it } from 'vitest';
import type { OrdersApi } from '../../src/contexts/orders/context.ts';
import { parseConfig } from '../../src/config.ts';
import { silentLogger } from '../../src/logger.ts';
import { modules } from '../../src/modules.ts';
import { createApiRole } from '../../src/roles/api.ts';
import { createRoleDeps } from '../../src/roles/shared.ts';
import { reporting } from '../../src/subscribers/reporting/subscriber.ts';
import { expectValidOpenApi, fetchApiDocument, undocumentedRoutes } from '../support/openapi.ts';
import { createExampleDb } from './support.ts';

describe('example openapi - the orders service describes itself', () => {
  it('serves a valid OpenAPI 3.1 document with every route, the order commands described by commandRoute', async () => {
    await using t = await createExampleDb();
    const shared = createRoleDeps(t.deps.db, { modules, log: silentLogger });
    const routes = [{ basePath: reporting.basePath!, routes: reporting.routes!(t.deps.db) }];
    const { app } = createApiRole(parseConfig({}), shared, { readiness: () => ({}), routes, version: '0.1.0' });

    const doc = await fetchApiDocument(app);
    await expectValidOpenApi(doc);
    expect(undocumentedRoutes(app, doc)).toEqual([]);
    expect(doc.info).toMatchObject({ title: 'hono-outbox', version: '0.1.0' });
    const paths = doc.paths as Record<
      string,
      Record<string, { summary?: string; requestBody?: { content: Record<string, { schema: { required?: string[] } }> } }>
    >;
    expect(paths['/orders']!.post!.requestBody!.content['application/json']!.schema.required).toEqual(['customerId', 'currency', 'items']);
    expect(paths['/orders/{id}/cancel']!.post!.summary).toBe('Cancel order');
    expect(paths['/orders/{id}']!.get!.summary).toBe('Read an order');
    expect(paths['/reports/customers/{customerId}']!.get!.summary).toBeTruthy();

    // the exported OrdersApi types a hono/client: the body below is checked by tsc against PlaceOrderBody
    const client = hc<OrdersApi>('http://orders.test', { fetch: (input: RequestInfo | URL, init?: RequestInit) => app.request(input, init) });
    const placed = await client.orders.$post({ json: { customerId: 'c-1', currency: 'EUR', items: [{ sku: 'A', quantity: 2, unitPriceCents: 150 }] } });
    expect(placed.status).toBe(201);
  });
});
