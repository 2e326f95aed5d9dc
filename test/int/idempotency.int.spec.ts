import { Hono } from 'hono';
import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { createApp } from '../../src/app.ts';
import { commandRoute, ok } from '../../src/http/command-route.ts';
import { createTestApp, createTestDb, tableCounts, type TestApp } from '../support/db.ts';
import { expectProblem, postJson } from '../support/http.ts';

async function snapshot(res: Response) {
  return {
    status: res.status,
    location: res.headers.get('location'),
    replayed: res.headers.get('idempotent-replayed'),
    body: (await res.json()) as Record<string, unknown>,
  };
}

const open = (a: TestApp, key?: string, owner = 'ann') => postJson(a.app, '/accounts', { owner }, key === undefined ? {} : { 'idempotency-key': key });

async function openedId(a: TestApp): Promise<string> {
  return z.object({ accountId: z.string() }).parse(await (await open(a)).json()).accountId;
}

describe('idempotency - a creating command (POST /accounts)', () => {
  it('the same key and body returns the first response, marked Idempotent-Replayed, and creates nothing new', async () => {
    await using a = await createTestApp();
    const first = await snapshot(await open(a, 'key-1'));
    expect(first.status).toBe(201);
    expect(first.replayed).toBeNull();
    expect(first.location).toBe(`/accounts/${first.body.accountId}`);
    const after = await tableCounts(a.client);
    expect(after).toEqual({ accounts: 1, outbox: 1, idempotency_keys: 1 });

    const second = await snapshot(await open(a, 'key-1'));
    expect(second).toEqual({ ...first, replayed: 'true' });
    expect(await tableCounts(a.client)).toEqual(after);
  });

  it('without a key the same body runs the command again', async () => {
    await using a = await createTestApp();
    expect((await open(a)).status).toBe(201);
    expect((await open(a)).status).toBe(201);
    expect(await tableCounts(a.client)).toEqual({ accounts: 2, outbox: 2, idempotency_keys: 0 });
  });

  it('different keys with the same body run separate commands', async () => {
    await using a = await createTestApp();
    const one = await snapshot(await open(a, 'key-1'));
    const two = await snapshot(await open(a, 'key-2'));
    expect(one.body.accountId).not.toBe(two.body.accountId);
    expect((await tableCounts(a.client)).accounts).toBe(2);
  });

  it('the same key with another body → 422 problem and nothing new stored', async () => {
    await using a = await createTestApp();
    expect((await open(a, 'key-1')).status).toBe(201);
    const before = await tableCounts(a.client);
    await expectProblem(await open(a, 'key-1', 'someone-else'), 422);
    expect(await tableCounts(a.client)).toEqual(before);
  });

  it('ten concurrent requests with one key run the command exactly once and all answer its response', async () => {
    await using a = await createTestApp();
    const responses = await Promise.all(Array.from({ length: 10 }, () => open(a, 'same-key').then(snapshot)));
    expect(responses.map((r) => r.status)).toEqual(Array(10).fill(201));
    expect(new Set(responses.map((r) => r.body.accountId)).size).toBe(1);
    expect(responses.filter((r) => r.replayed === 'true')).toHaveLength(9);
    expect(await tableCounts(a.client)).toEqual({ accounts: 1, outbox: 1, idempotency_keys: 1 });
  });

  it('a key that failed validation is not remembered: the corrected request with it succeeds', async () => {
    await using a = await createTestApp();
    expect((await postJson(a.app, '/accounts', { owner: '' }, { 'idempotency-key': 'key-1' })).status).toBe(400);
    expect((await open(a, 'key-1')).status).toBe(201);
    expect((await tableCounts(a.client)).accounts).toBe(1);
  });

  it.each([
    ['300 characters', 'k'.repeat(300)],
    ['an empty value', ''],
    ['a space inside', 'my key'],
  ])('a key of %s → 400 problem and nothing stored', async (_label, key) => {
    await using a = await createTestApp();
    const problem = await expectProblem(await open(a, key), 400);
    expect(problem.detail).toMatch(/Idempotency-Key/);
    expect(await tableCounts(a.client)).toEqual({ accounts: 0, outbox: 0, idempotency_keys: 0 });
  });

  it('a key of 255 visible characters is accepted', async () => {
    await using a = await createTestApp();
    expect((await open(a, 'k'.repeat(255))).status).toBe(201);
  });
});

describe('idempotency - a command on an existing aggregate (POST /accounts/:id/close)', () => {
  it('a repeated command with the same key replays 200 instead of answering 409, and emits one event', async () => {
    await using a = await createTestApp();
    const id = await openedId(a);
    const first = await snapshot(await postJson(a.app, `/accounts/${id}/close`, {}, { 'idempotency-key': 'close-1' }));
    expect(first).toMatchObject({ status: 200, replayed: null, body: { accountId: id, status: 'closed' } });
    const second = await snapshot(await postJson(a.app, `/accounts/${id}/close`, {}, { 'idempotency-key': 'close-1' }));
    expect(second).toEqual({ ...first, replayed: 'true' });
    const events = await a.client.execute(`SELECT message_type FROM outbox ORDER BY seq`);
    expect(events.rows.map((r) => r[0])).toEqual(['account.opened.v1', 'account.closed.v1']);
  });

  it('the same command with a new key after it succeeded is refused again (409)', async () => {
    await using a = await createTestApp();
    const id = await openedId(a);
    expect((await postJson(a.app, `/accounts/${id}/close`, {}, { 'idempotency-key': 'close-1' })).status).toBe(200);
    expect((await postJson(a.app, `/accounts/${id}/close`, {}, { 'idempotency-key': 'close-2' })).status).toBe(409);
  });

  it('a refused command (unknown aggregate) stores no key, so it is answered 404 again', async () => {
    await using a = await createTestApp();
    expect((await postJson(a.app, '/accounts/missing/close', {}, { 'idempotency-key': 'close-1' })).status).toBe(404);
    expect((await postJson(a.app, '/accounts/missing/close', {}, { 'idempotency-key': 'close-1' })).status).toBe(404);
    expect((await tableCounts(a.client)).idempotency_keys).toBe(0);
  });

  it('a key used on one command, reused on another path, is a 422 and runs nothing', async () => {
    await using a = await createTestApp();
    const res = await open(a, 'shared');
    const id = z.object({ accountId: z.string() }).parse(await res.json()).accountId;
    expect((await postJson(a.app, `/accounts/${id}/deposit`, { amountCents: 5 }, { 'idempotency-key': 'shared' })).status).toBe(422);
    expect(await (await a.app.request(`/accounts/${id}`)).json()).toMatchObject({ balanceCents: 0, version: 1 });
  });
});

describe('idempotency - the fingerprint is the validated body', () => {
  it('the same body with its keys in another order and other whitespace is the same request', async () => {
    await using t = await createTestDb();
    let runs = 0;
    const Body = z.strictObject({ title: z.string(), count: z.number() });
    const app = createApp(t.deps, {
      extend: (a) => a.route('/notes', new Hono().post('/', ...commandRoute(t.deps, Body, async (_tx, body) => ok({ run: ++runs, ...body })))),
    });
    const send = (raw: string) => postJson(app, '/notes', raw, { 'idempotency-key': 'note-1' });
    const first = await snapshot(await send('{"title":"a","count":1}'));
    const second = await snapshot(await send('{ "count": 1,\n  "title": "a" }'));
    expect(first).toMatchObject({ status: 200, body: { run: 1 } });
    expect(second).toEqual({ ...first, replayed: 'true' });
    expect((await send('{"title":"a","count":2}')).status).toBe(422);
    expect(runs).toBe(1);
  });
});
