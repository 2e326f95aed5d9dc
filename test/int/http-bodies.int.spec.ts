// How a command route reads its body, whatever the context: JSON only (415), at most 64 KiB (413), valid against
// its schema (400 listing the issues), an optional body where the route allows one; unknown routes are 404 problems;
// and no request, however malformed, gets a 5xx. Run on the fixture's routes (commandRoute as a context uses it).
import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { createTestApp, tableCounts, type TestApp } from '../support/db.ts';
import { expectIssues, expectProblem, expectUnchanged, postJson } from '../support/http.ts';
import { createRandom } from '../support/random.ts';

const JSON_HEADERS = { 'content-type': 'application/json' };

async function openOne(a: TestApp): Promise<string> {
  const res = await postJson(a.app, '/accounts', { owner: 'ann' });
  expect(res.status).toBe(201);
  return z.object({ accountId: z.string() }).parse(await res.json()).accountId;
}

const unchanged = (a: TestApp, send: () => Promise<void>) => expectUnchanged(a.client, send);

describe('http - a command body that does not match its schema is a 400 problem listing the issues', () => {
  it.each([
    ['an empty object', {}, ['owner']],
    ['a field of the wrong type', { owner: 123 }, ['owner']],
    ['a string too long', { owner: 'o'.repeat(65) }, ['owner']],
    ['an unknown field', { owner: 'ann', extra: 1 }, ['']],
    ['JSON null', null, ['']],
    ['a JSON array', [{ owner: 'ann' }], ['']],
    ['a JSON string', JSON.stringify('ann'), ['']],
    ['a JSON number', 42, ['']],
  ])('%s → 400 and nothing stored', async (_label, body, paths) => {
    await using a = await createTestApp();
    await unchanged(a, async () => {
      await expectIssues(await postJson(a.app, '/accounts', body), paths);
    });
  });

  it('names an unknown field in its issue', async () => {
    await using a = await createTestApp();
    const problem = await expectIssues(await postJson(a.app, '/accounts', { owner: 'ann', discount: 10 }), ['']);
    expect(problem.issues!.some((i) => i.code === 'unrecognized_keys' && i.message.includes('discount'))).toBe(true);
  });

  it('a command on an existing aggregate validates its body before looking the aggregate up', async () => {
    await using a = await createTestApp();
    const id = await openOne(a);
    await unchanged(a, async () => {
      await expectIssues(await postJson(a.app, `/accounts/${id}/deposit`, { amountCents: 0 }), ['amountCents']);
      await expectIssues(await postJson(a.app, '/accounts/missing/deposit', { amountCents: 1.5 }), ['amountCents']);
    });
  });
});

describe('http - bodies a command route cannot read', () => {
  it('malformed JSON → 400 and nothing stored', async () => {
    await using a = await createTestApp();
    await unchanged(a, async () => {
      await expectProblem(await postJson(a.app, '/accounts', '{"owner": "ann",'), 400);
    });
  });

  it.each([
    ['text/plain', { 'content-type': 'text/plain' }],
    ['form-urlencoded', { 'content-type': 'application/x-www-form-urlencoded' }],
    ['no content type', {}],
  ])('a %s body → 415 and nothing stored', async (_label, headers) => {
    await using a = await createTestApp();
    await unchanged(a, async () => {
      await expectProblem(await a.app.request('/accounts', { method: 'POST', headers, body: JSON.stringify({ owner: 'ann' }) }), 415);
    });
  });

  it('a JSON media type with parameters or a +json suffix is accepted', async () => {
    await using a = await createTestApp();
    expect((await postJson(a.app, '/accounts', { owner: 'ann' }, { 'content-type': 'application/json; charset=utf-8' })).status).toBe(201);
    expect((await postJson(a.app, '/accounts', { owner: 'ann' }, { 'content-type': 'application/vnd.accounts+json' })).status).toBe(201);
  });

  it('a body over 64 KiB with Content-Length → 413 and nothing stored', async () => {
    await using a = await createTestApp();
    const body = JSON.stringify({ owner: 'x'.repeat(70_000) });
    await unchanged(a, async () => {
      await expectProblem(await postJson(a.app, '/accounts', body, { 'content-length': String(Buffer.byteLength(body)) }), 413);
    });
  });

  it('a body over 64 KiB streamed without Content-Length → 413 and nothing stored', async () => {
    await using a = await createTestApp();
    const chunk = new TextEncoder().encode(JSON.stringify({ owner: 'x'.repeat(16 * 1024) }));
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < 5; i++) controller.enqueue(chunk);
        controller.close();
      },
    });
    await unchanged(a, async () => {
      const init: RequestInit & { duplex: 'half' } = { method: 'POST', headers: JSON_HEADERS, body: stream, duplex: 'half' };
      await expectProblem(await a.app.request('/accounts', init), 413);
    });
  });

  it('the limit is 64 KiB exactly: 65,536 bytes are read (and validated), 65,537 are refused', async () => {
    await using a = await createTestApp();
    const sized = (bytes: number) => `{"owner":"${'x'.repeat(bytes - '{"owner":""}'.length)}"}`;
    expect(Buffer.byteLength(sized(65_536))).toBe(65_536);
    await unchanged(a, async () => {
      await expectIssues(await postJson(a.app, '/accounts', sized(65_536)), ['owner']);
      await expectProblem(await postJson(a.app, '/accounts', sized(65_537)), 413);
    });
  });
});

describe('http - a route that allows an empty body (emptyBody)', () => {
  it('runs without a body and without a content type', async () => {
    await using a = await createTestApp();
    const id = await openOne(a);
    const res = await a.app.request(`/accounts/${id}/close`, { method: 'POST' });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ accountId: id, status: 'closed' });
  });

  it('runs with Content-Type application/json and an empty body', async () => {
    await using a = await createTestApp();
    const id = await openOne(a);
    const res = await a.app.request(`/accounts/${id}/close`, { method: 'POST', headers: { ...JSON_HEADERS, 'content-length': '0' }, body: '' });
    expect(res.status).toBe(200);
  });

  it('still refuses a body it cannot read or that does not match, and runs nothing', async () => {
    await using a = await createTestApp();
    const id = await openOne(a);
    await unchanged(a, async () => {
      await expectProblem(await postJson(a.app, `/accounts/${id}/close`, '{"reason":'), 400);
      await expectProblem(await postJson(a.app, `/accounts/${id}/close`, 'because', { 'content-type': 'text/plain' }), 415);
      await expectIssues(await postJson(a.app, `/accounts/${id}/close`, { reason: 'x' }), ['']);
      await expectIssues(await postJson(a.app, `/accounts/${id}/close`, null), ['']);
    });
    expect(await (await a.app.request(`/accounts/${id}`)).json()).toMatchObject({ status: 'open', version: 1 });
  });
});

describe('http - routing', () => {
  it.each([
    ['GET', '/nope'],
    ['POST', '/accounts/a/b'],
    ['DELETE', '/accounts'],
    ['PUT', '/accounts/x'],
  ])('%s %s → 404 problem', async (method, path) => {
    await using a = await createTestApp();
    await unchanged(a, async () => {
      await expectProblem(await a.app.request(path, { method, ...(method === 'GET' ? {} : { headers: JSON_HEADERS, body: '{}' }) }), 404);
    });
  });

  it('GET of an unknown aggregate → 404 problem', async () => {
    await using a = await createTestApp();
    await expectProblem(await a.app.request('/accounts/01a22aff-0000-7000-8000-000000000000'), 404);
  });
});

describe('http - fuzz', () => {
  it('no generated request yields a 5xx, every refusal is a problem, and every account has exactly its events', async () => {
    await using a = await createTestApp();
    const known = await openOne(a);
    const rnd = createRandom(0x5eed);
    const STRINGS = ['', 'ann', 'é😀', '\u0000', '\ud800', 'a.b*>', ' ', "'; DROP TABLE accounts; --", 'x'.repeat(64), 'x'.repeat(65), '{}', 'null'];
    const NUMBERS = [0, -1, 1, 1.5, 100_000_000, 100_000_001, Number.MAX_SAFE_INTEGER, 1e308];
    const value = (depth: number): unknown => {
      switch (rnd.int(0, depth > 2 ? 3 : 5)) {
        case 0:
          return null;
        case 1:
          return rnd.chance(0.5);
        case 2:
          return rnd.pick(NUMBERS);
        case 3:
          return rnd.pick(STRINGS);
        case 4:
          return Array.from({ length: rnd.int(0, 3) }, () => value(depth + 1));
        default:
          return Object.fromEntries(Array.from({ length: rnd.int(0, 3) }, () => [rnd.pick(['owner', 'amountCents', '__proto__', 'x']), value(depth + 1)]));
      }
    };
    const body = (): string => {
      const r = rnd.next();
      if (r < 0.25) return JSON.stringify(rnd.chance(0.5) ? { owner: rnd.pick(STRINGS) } : { amountCents: rnd.pick(NUMBERS) });
      if (r < 0.8) return JSON.stringify(value(0)) ?? 'null';
      const text = JSON.stringify(value(0)) ?? '{}';
      return text.slice(0, rnd.int(0, text.length)) + rnd.pick(['', '}', ',', '\u0000']);
    };
    for (let i = 0; i < 300; i++) {
      const path = rnd.pick(['/accounts', `/accounts/${known}/deposit`, `/accounts/${known}/close`, '/accounts/missing/deposit', '/accounts/a%20b/close']);
      const headers: Record<string, string> = {};
      const type = rnd.chance(0.85)
        ? rnd.pick(['application/json', 'application/json; charset=utf-8', 'APPLICATION/JSON'])
        : rnd.pick(['text/plain', 'application/jsonx', '']);
      if (type) headers['content-type'] = type;
      if (rnd.chance(0.2)) headers['idempotency-key'] = `k-${rnd.int(0, 4)}`;
      const sent = body();
      const res = await a.app.request(path, { method: 'POST', headers, body: sent });
      const text = await res.text();
      const context = `case ${i}: POST ${path} ${JSON.stringify(headers)} ${sent.slice(0, 200)} → ${res.status} ${text.slice(0, 200)}`;
      expect(res.status, context).toBeLessThan(500);
      if (res.status >= 400) expect(res.headers.get('content-type'), context).toBe('application/problem+json');
    }
    const { accounts, outbox } = await tableCounts(a.client);
    const versions = await a.client.execute('SELECT sum(version) FROM accounts');
    expect(outbox).toBe(Number(versions.rows[0]![0]));
    expect(accounts).toBeGreaterThan(1);
  });
});
