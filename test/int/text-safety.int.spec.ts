// Text the database would not give back as sent (libSQL cuts at NUL, turns a lone surrogate into U+FFFD): refused
// at the HTTP edge with a 400 naming the field, by the event schemas, and by the outbox whatever the schema says.
import { z } from 'zod';
import { afterEach, describe, expect, it } from 'vitest';
import { createAppRegistry } from '../../src/events/catalog.ts';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { createEventRegistry, InvalidEventError } from '../../src/events/registry.ts';
import { orderEventSchemas } from '../../src/orders/order-events.ts';
import { appendToOutbox, UnstorableTextError, type OutboxHeaders } from '../../src/outbox/append-to-outbox.ts';
import { createTestApp, createTestDb, orderBody, tableCounts, type TestApp, type TestDb } from '../support/db.ts';

const EMPTY = { orders: 0, order_lines: 0, outbox: 0, idempotency_keys: 0 };

const opened: Array<{ close(): void }> = [];
afterEach(() => {
  for (const t of opened.splice(0)) t.close();
});
async function app(): Promise<TestApp> {
  const t = await createTestApp();
  opened.push(t);
  return t;
}
async function testDb(registry = createAppRegistry()): Promise<TestDb> {
  const t = await createTestDb({ registry });
  opened.push(t);
  return t;
}

const post = (a: TestApp, path: string, body: unknown) =>
  a.app.request(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

type Problem = { status: number; issues?: Array<{ path: string; code: string; message: string }> };

const UNSAFE: Array<[string, string]> = [
  ['a NUL', 'acme\u0000x'],
  ['a tab', 'acme\tx'],
  ['a line feed', 'acme\nx'],
  ['DEL', 'acme\u007fx'],
  ['a C1 control (NEL)', 'acme\u0085x'],
  ['a lone high surrogate', 'acme\ud800x'],
  ['a lone low surrogate', '\udc00acme'],
  ['a surrogate pair reversed', 'acme\ude00\ud83dx'],
];

/** Asserts a 400 validation problem whose only issue is at `path`. */
async function expectRefusedAt(res: Response, path: string): Promise<void> {
  expect(res.status).toBe(400);
  expect(res.headers.get('content-type')).toBe('application/problem+json');
  const problem = (await res.json()) as Problem;
  expect(problem.issues?.map((i) => i.path)).toEqual([path]);
  expect(problem.issues![0]!.message).toMatch(/control characters or unpaired surrogates/);
}

describe('text safety - HTTP bodies refuse text that cannot be stored as sent', () => {
  it.each(UNSAFE)('a customerId with %s → 400 naming customerId, no order and no outbox row; the same id with an emoji is placed', async (_label, text) => {
    const a = await app();
    await expectRefusedAt(await post(a, '/orders', orderBody({ customerId: text })), 'customerId');
    expect(await tableCounts(a.client)).toEqual(EMPTY);
    expect((await post(a, '/orders', orderBody({ customerId: 'acme😀x' }))).status).toBe(201);
  });

  it.each(UNSAFE)('a sku with %s → 400 naming items.1.sku and nothing stored', async (_label, text) => {
    const a = await app();
    const items = [
      { sku: 'fine', quantity: 1, unitPriceCents: 100 },
      { sku: text, quantity: 1, unitPriceCents: 100 },
    ];
    await expectRefusedAt(await post(a, '/orders', orderBody({ items })), 'items.1.sku');
    expect(await tableCounts(a.client)).toEqual(EMPTY);
  });

  it.each(UNSAFE)('a cancel reason with %s → 400 naming reason; the order stays placed with only its placed event', async (_label, text) => {
    const a = await app();
    const placed = await post(a, '/orders', orderBody());
    const { orderId } = (await placed.json()) as { orderId: string };
    await expectRefusedAt(await post(a, `/orders/${orderId}/cancel`, { reason: text }), 'reason');
    expect(await (await a.app.request(`/orders/${orderId}`)).json()).toMatchObject({ status: 'placed', version: 1 });
    expect(await tableCounts(a.client)).toEqual({ orders: 1, order_lines: 2, outbox: 1, idempotency_keys: 0 });
  });
});

describe('text safety - the order event schemas refuse it, so no subscriber applies it', () => {
  const at = '2026-03-01T10:00:00.000Z';
  const envelope = { eventId: 'e-1', aggregateType: 'order', aggregateId: 'o-1', aggregateVersion: 1, occurredAt: at };
  const placed = (data: Record<string, unknown>) => ({
    ...envelope,
    type: 'order.placed.v1',
    data: { orderId: 'o-1', customerId: 'c', currency: 'EUR', items: [{ sku: 's', quantity: 1, unitPriceCents: 1 }], totalCents: 1, placedAt: at, ...data },
  });
  const cancelled = (data: Record<string, unknown>) => ({
    ...envelope,
    type: 'order.cancelled.v1',
    aggregateVersion: 2,
    data: { orderId: 'o-1', customerId: 'c', reason: null, totalCents: 1, cancelledAt: at, ...data },
  });

  it.each([
    ['order.placed.v1 customerId with a NUL', placed({ customerId: 'acme\u0000x' }), 'customerId'],
    ['order.placed.v1 sku with a lone surrogate', placed({ items: [{ sku: 's\ud800', quantity: 1, unitPriceCents: 1 }] }), 'items'],
    ['order.placed.v1 orderId with DEL', placed({ orderId: 'o\u007f' }), 'orderId'],
    ['order.cancelled.v1 customerId with a NUL', cancelled({ customerId: 'acme\u0000x' }), 'customerId'],
    ['order.cancelled.v1 reason with a C1 control', cancelled({ reason: 'why\u0085' }), 'reason'],
  ])('%s is an invalid event', (_label, event, field) => {
    const registry = createAppRegistry();
    expect(() => registry.parse(event)).toThrow(InvalidEventError);
    expect(() => registry.parse(event)).toThrow(field);
  });

  it.each([
    ['an eventId', { eventId: 'e\u0000' }],
    ['an aggregateId', { aggregateId: 'o\ud800' }],
  ])('an envelope with a NUL or a lone surrogate in %s is an invalid event', (_label, over) => {
    expect(() => createAppRegistry().parse({ ...placed({}), ...over })).toThrow(InvalidEventError);
  });
});

describe('text safety - appendToOutbox refuses text the outbox would not store as published', () => {
  // A registry whose schema lets any string through: the outbox's own check is what stands in the way.
  const lax = () => createEventRegistry({ ...orderEventSchemas, 'note.added.v1': z.object({ note: z.record(z.string(), z.string()) }) });
  const note = (data: Record<string, string>, over: Partial<IntegrationEvent> = {}): IntegrationEvent => ({
    eventId: crypto.randomUUID(),
    type: 'note.added.v1',
    aggregateType: 'note',
    aggregateId: 'n-1',
    aggregateVersion: 1,
    occurredAt: '2026-03-01T10:00:00.000Z',
    data: { note: data },
    ...over,
  });
  const append = (t: TestDb, events: IntegrationEvent[], headers?: OutboxHeaders) =>
    t.deps.writer.write((tx) => appendToOutbox(tx, events, { registry: t.deps.registry, now: new Date(), ...(headers ? { headers } : {}) }));

  it.each([
    ['a NUL in a payload value', note({ text: 'before\u0000after' }), 'event.data.note.text'],
    ['a lone surrogate in a payload value', note({ text: 'x\udbff' }), 'event.data.note.text'],
    ['a NUL in a payload key', note({ 'k\u0000': 'v' }), 'event.data.note (a key)'],
  ])('%s → UnstorableTextError naming where, and the batch is not stored', async (_label, bad, where) => {
    const t = await testDb(lax());
    const error = await append(t, [note({ text: 'fine, with a tab\tand é😀' }), bad]).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UnstorableTextError);
    expect((error as Error).message).toContain(where);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });

  it('a NUL in a header value → UnstorableTextError and nothing stored', async () => {
    const t = await testDb(lax());
    await expect(append(t, [note({ text: 'ok' })], { correlationId: 'corr\u0000' })).rejects.toBeInstanceOf(UnstorableTextError);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });

  it('a lone surrogate in the aggregate id is refused and nothing stored', async () => {
    const t = await testDb(lax());
    await expect(append(t, [note({ text: 'ok' }, { aggregateId: 'n\ud800' })])).rejects.toThrow(/surrogate/);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });
});
