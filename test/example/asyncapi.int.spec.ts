import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ASYNCAPI_YAML, renderAsyncApiYaml } from '../../scripts/asyncapi.ts';
import { operationsOf, parseAsyncApi } from '../support/asyncapi.ts';

describe('asyncapi - docs/asyncapi.yaml describes the example service', () => {
  it('is what `npm run docs:asyncapi` writes for the current events and subscribers', () => {
    expect(readFileSync(ASYNCAPI_YAML, 'utf8'), 'docs/asyncapi.yaml is stale: run npm run docs:asyncapi').toBe(renderAsyncApiYaml());
  });

  it('is a valid AsyncAPI 3 document: the order channel, its send operation, reporting and notifications receiving their types', async () => {
    const parsed = await parseAsyncApi(readFileSync(ASYNCAPI_YAML, 'utf8'));
    const order = 'hono-outbox.order.{aggregateId}.{partition}';
    expect(
      parsed
        .channels()
        .all()
        .map((c) => c.address()),
    ).toContain(order);
    const ops = operationsOf(parsed);
    expect(ops['send.order']).toEqual(['send', order, expect.arrayContaining(['order.placed.v1', 'order.cancelled.v1'])]);
    expect(ops['receive.reporting.order']).toEqual(['receive', order, ['order.placed.v1', 'order.cancelled.v1']]);
    expect(ops['receive.notifications.order']).toEqual(['receive', order, ['order.placed.v1']]);
  });
});
