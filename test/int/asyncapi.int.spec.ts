import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { parseConfig } from '../../src/config.ts';
import { describeEvents } from '../../src/events/asyncapi.ts';
import { defineEvents } from '../../src/events/define-events.ts';
import { silentLogger } from '../../src/logger.ts';
import { eventHeaders } from '../../src/outbox/event-headers.ts';
import { createApiRole } from '../../src/roles/api.ts';
import { createRoleDeps } from '../../src/roles/shared.ts';
import { operationsOf, parseAsyncApi } from '../support/asyncapi.ts';
import { createTestDb } from '../support/db.ts';
import { MAX_DEPOSIT_CENTS } from '../support/fixture/accounts/events.ts';
import { fixtureModules } from '../support/fixture/modules.ts';

type Schema = { properties: Record<string, Schema & Record<string, unknown>>; required?: string[] } & Record<string, unknown>;
const schemaOf = (doc: ReturnType<typeof describeEvents>, key: string) => doc.components.schemas[key] as Schema;

describe('asyncapi - the event description of the fixture service', () => {
  const doc = describeEvents(fixtureModules, { service: 'ledger' });

  it('is a valid AsyncAPI 3 document: one channel per aggregate type, a send operation, a receive operation per subscriber with its types', async () => {
    const parsed = await parseAsyncApi(doc);
    expect(parsed.version()).toBe('3.0.0');
    expect(
      parsed
        .servers()
        .all()
        .map((s) => [s.protocol(), s.host()]),
    ).toEqual([['nats', '{host}']]);
    expect(
      parsed
        .channels()
        .all()
        .map((c) => [
          c.address(),
          c
            .parameters()
            .all()
            .map((p) => p.id()),
        ]),
    ).toEqual([['ledger.account.{aggregateId}.{partition}', ['aggregateId', 'partition']]]);
    expect(operationsOf(parsed)).toEqual({
      'send.account': ['send', 'ledger.account.{aggregateId}.{partition}', ['account.opened.v1', 'account.credited.v1', 'account.closed.v1']],
      'receive.balances.account': ['receive', 'ledger.account.{aggregateId}.{partition}', ['account.opened.v1', 'account.credited.v1', 'account.closed.v1']],
      'receive.audit.account': ['receive', 'ledger.account.{aggregateId}.{partition}', ['account.opened.v1', 'account.credited.v1', 'account.closed.v1']],
    });
    expect(doc.operations['receive.balances.account']!.description).toContain('`ledger-balances`');
  });

  it('gives each message the envelope with its type, aggregate and data schema, with the zod limits as JSON Schema', () => {
    const credited = schemaOf(doc, 'account.credited.v1');
    expect(credited.additionalProperties).toBe(false);
    expect(credited.properties.type!.const).toBe('account.credited.v1');
    expect(credited.properties.aggregateType!.const).toBe('account');
    expect(credited.properties.aggregateVersion).toMatchObject({ type: 'integer', exclusiveMinimum: 0 });
    const data = credited.properties.data!;
    expect(data.required).toEqual(['accountId', 'owner', 'amountCents']);
    expect(data.properties.amountCents).toMatchObject({ type: 'integer', minimum: 1, maximum: MAX_DEPOSIT_CENTS });
    expect(data.properties.owner).toMatchObject({ type: 'string', minLength: 1, maxLength: 64 });
    // safe text keeps its rule as a pattern: what the service would refuse, a consumer's validator refuses too
    const safe = new RegExp(String(data.properties.owner!.pattern), 'u');
    expect(['ann', 'Zoë 🙂'].map((s) => safe.test(s))).toEqual([true, true]);
    expect(['a\u0000b', 'a\u0085b', 'a\ud800b'].map((s) => safe.test(s))).toEqual([false, false, false]);
  });

  it('describes every header the relay sets, and requires the ones it always sets', () => {
    const event = {
      eventId: 'e-1',
      type: 'account.opened.v1',
      aggregateType: 'account',
      aggregateId: 'a-1',
      aggregateVersion: 1,
      occurredAt: '2026-01-02T03:04:05.006Z',
      data: {},
    };
    // the relay always passes its publish span's traceparent; tracestate and the correlation id only when stored
    const traceparent = `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`;
    const always = [...eventHeaders(event, { traceparent }).keys(), 'Nats-Msg-Id'];
    const all = [...eventHeaders(event, { traceparent, tracestate: 'vendor=x', correlationId: 'req-1' }).keys(), 'Nats-Msg-Id'];
    const headers = schemaOf(doc, 'account.opened.v1.headers');
    expect(Object.keys(headers.properties).sort()).toEqual([...all].sort());
    expect([...headers.required!].sort()).toEqual([...always].sort());
    expect(headers.properties['Event-Type']!.const).toBe('account.opened.v1');
  });

  it('puts a subschema with an id, or a recursive one, under its own key in components.schemas, and stays valid', async () => {
    const Money = z.strictObject({ cents: z.number().int().min(0) }).meta({ id: 'Money' });
    const Part: z.ZodType<{ name: string; parts: unknown[] }> = z.strictObject({
      name: z.string().max(20),
      get parts() {
        return z.array(Part);
      },
    });
    const events = defineEvents({
      'kit.priced.v1': { aggregate: 'kit', data: z.strictObject({ price: Money, root: Part }) },
      'kit.repriced.v1': { aggregate: 'kit', data: z.strictObject({ price: Money }) },
    });
    const described = describeEvents({ events }, { service: 'ledger' });
    await parseAsyncApi(described);
    const data = schemaOf(described, 'kit.priced.v1').properties.data!;
    expect(data.properties.price).toEqual({ $ref: '#/components/schemas/Money' });
    expect(schemaOf(described, 'Money').properties.cents).toMatchObject({ type: 'integer', minimum: 0 });
    expect(String(data.properties.root!.$ref)).toMatch(/^#\/components\/schemas\/\w+$/);
  });

  it('refuses an event schema with no JSON Schema form, naming its type', () => {
    const events = defineEvents({ 'thing.made.v1': { aggregate: 'thing', data: z.strictObject({ at: z.date() }) } });
    expect(() => describeEvents({ events }, { service: 'ledger' })).toThrow(/thing\.made\.v1/);
  });

  it('GET /asyncapi.json (api role) serves it with the configured prefix and NATS hosts, never the credentials', async () => {
    await using t = await createTestDb();
    const env = { SERVICE_NAME: 'ledger', EVENTS_SUBJECT_PREFIX: 'acme.ledger', NATS_URL: 'nats://svc:s3cret@nats-a.internal:4222,tls://nats-b.internal:4443' };
    const shared = createRoleDeps(t.deps.db, { modules: fixtureModules, log: silentLogger });
    const { app } = createApiRole(parseConfig({ ...env, ROLES: 'api' }), shared, { readiness: () => ({}) });
    const res = await app.request('/asyncapi.json');
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).not.toContain('s3cret');
    const parsed = await parseAsyncApi(JSON.parse(text) as { asyncapi: string });
    expect(
      parsed
        .servers()
        .all()
        .map((s) => s.host()),
    ).toEqual(['nats-a.internal:4222', 'nats-b.internal:4443']);
    expect(
      parsed
        .channels()
        .all()
        .map((c) => c.address()),
    ).toEqual(['acme.ledger.account.{aggregateId}.{partition}']);
    const relayOnly = createApiRole(parseConfig({ ...env, ROLES: 'relay' }), shared, { readiness: () => ({}) });
    expect((await relayOnly.app.request('/asyncapi.json')).status).toBe(404);
  });
});
