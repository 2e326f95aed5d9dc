// Text the database would not give back as sent (libSQL cuts at NUL, turns a lone surrogate into U+FFFD): refused
// at the HTTP edge with a 400 naming the field (safeText in a body schema), by the event schemas, and by the outbox
// whatever the schema says.
import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { defineEvents } from '../../src/events/define-events.ts';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { createEventRegistry, InvalidEventError } from '../../src/events/registry.ts';
import { safeText } from '../../src/events/safe-text.ts';
import { appendToOutbox, UnstorableTextError, type OutboxHeaders } from '../../src/outbox/append-to-outbox.ts';
import { openedEvent } from '../support/accounts.ts';
import { createTestApp, createTestDb, tableCounts, type TestDb } from '../support/db.ts';
import { fixtureEvents } from '../support/fixture/modules.ts';
import { expectProblem, postJson } from '../support/http.ts';
import { UNSAFE_TEXT } from '../support/unsafe-text.ts';

const EMPTY = { accounts: 0, outbox: 0, idempotency_keys: 0 };

describe('text safety - safeText', () => {
  it.each(UNSAFE_TEXT)('refuses %s', (_label, text) => {
    expect(safeText().safeParse(text).success).toBe(false);
  });

  it.each([
    ['an emoji (a surrogate pair)', 'acme😀x'],
    ['accented letters', 'é à ü ß'],
    ['a plain space', 'a b'],
  ])('accepts %s', (_label, text) => {
    expect(safeText().parse(text)).toBe(text);
  });
});

describe('text safety - HTTP bodies refuse text that cannot be stored as sent', () => {
  it.each(UNSAFE_TEXT)('a safeText field with %s → 400 naming the field and nothing stored; the same value with an emoji is accepted', async (_label, text) => {
    await using a = await createTestApp();
    const problem = await expectProblem(await postJson(a.app, '/accounts', { owner: text }), 400);
    expect(problem.issues?.map((i) => i.path)).toEqual(['owner']);
    expect(problem.issues![0]!.message).toMatch(/control characters or unpaired surrogates/);
    expect(await tableCounts(a.client)).toEqual(EMPTY);
    expect((await postJson(a.app, '/accounts', { owner: 'acme😀x' })).status).toBe(201);
  });
});

describe('text safety - event schemas built on safeText refuse it, so no subscriber applies it', () => {
  const registry = createEventRegistry(fixtureEvents);

  it.each([
    ['owner with a NUL', { owner: 'acme\u0000x' }, 'owner'],
    ['owner with a lone surrogate', { owner: 'acme\ud800' }, 'owner'],
    ['accountId with DEL', { accountId: 'a\u007f' }, 'accountId'],
  ])('account.opened.v1 %s is an invalid event', (_label, data, field) => {
    const event = openedEvent();
    expect(() => registry.parse({ ...event, data: { ...event.data, ...data } })).toThrow(InvalidEventError);
    expect(() => registry.parse({ ...event, data: { ...event.data, ...data } })).toThrow(field);
  });

  it.each([
    ['an eventId', { eventId: 'e\u0000' }],
    ['an aggregateId', { aggregateId: 'o\ud800' }],
  ])('an envelope with a NUL or a lone surrogate in %s is an invalid event', (_label, over) => {
    expect(() => registry.parse({ ...openedEvent(), ...over })).toThrow(InvalidEventError);
  });
});

describe('text safety - appendToOutbox refuses text the outbox would not store as published', () => {
  // A registry whose schema lets any string through: the outbox's own check is what stands in the way.
  const lax = () =>
    createEventRegistry(defineEvents({ ...fixtureEvents, 'note.added.v1': { aggregate: 'note', data: z.object({ note: z.record(z.string(), z.string()) }) } }));
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
    await using t = await createTestDb({ deps: { registry: lax() } });
    const error = await append(t, [note({ text: 'fine, with a tab\tand é😀' }), bad]).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UnstorableTextError);
    expect((error as Error).message).toContain(where);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });

  it('a NUL in a header value → UnstorableTextError and nothing stored', async () => {
    await using t = await createTestDb({ deps: { registry: lax() } });
    await expect(append(t, [note({ text: 'ok' })], { correlationId: 'corr\u0000' })).rejects.toBeInstanceOf(UnstorableTextError);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });

  it('a lone surrogate in the aggregate id is refused and nothing stored', async () => {
    await using t = await createTestDb({ deps: { registry: lax() } });
    await expect(append(t, [note({ text: 'ok' }, { aggregateId: 'n\ud800' })])).rejects.toThrow(/surrogate/);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });
});
