import { createClient, type InArgs } from '@libsql/client';
import { describe, expect, it } from 'vitest';
import { defineModules, type Modules } from '../../src/compose/define-modules.ts';
import { DEAD_LETTER_PAGE_SQL } from '../../src/inbox/dead-letters.ts';
import { defineSubscriber } from '../../src/inbox/subscriber.ts';
import { ConfigError } from '../../src/config.ts';
import { createLogger, type Logger } from '../../src/logger.ts';
import { requireBearer } from '../../src/ops/bearer-auth.ts';
import { FAILED_PAGE_SQL } from '../../src/outbox/failed-rows.ts';
import { creditedEvent } from '../support/accounts.ts';
import { createSubscriberDb } from '../support/consumer.ts';
import { countRows, createTestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { accountsContext } from '../support/fixture/accounts/context.ts';
import { fixtureEvents, fixtureModules, type FixtureEvents } from '../support/fixture/modules.ts';
import { audit } from '../support/fixture/subscribers/audit/subscriber.ts';
import { balances, readOwnerBalance } from '../support/fixture/subscribers/balances/subscriber.ts';
import { expectProblem } from '../support/http.ts';
import { createTestService } from '../support/service.ts';
import { freshStream, ownStream, publishEvents, publishRaw, streamEnv } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';
import { partitionOf } from '../../src/outbox/partition.ts';

const nats = useNats();

const TOKEN = 'test-admin-token-0123456789';
const auth = { Authorization: `Bearer ${TOKEN}` };

type Page<T> = { items: T[]; next: string | number | null };
type DeadLetterItem = {
  eventId: string;
  subject: string;
  type: string | null;
  headers: Record<string, string>;
  payload: unknown;
  error: string;
  deliveries: number;
  deadAt: string;
};
type FailedItem = { id: string; seq: number; messageType: string; attempts: number; lastError: string | null; payload: unknown };

/**
 * A service running the consumers role (balances and audit, or those of `modules`) over subscriber databases of
 * its own, on a stream of its own, with ADMIN_TOKEN unless `token` is null; `sdb` reads the subscribers' databases.
 */
async function startService(options: { token?: string | null; modules?: Modules; log?: Logger } = {}) {
  const stream = await freshStream(nats().nc, 'ADM');
  const sdb = { balances: await createSubscriberDb({ subscriber: 'balances' }), audit: await createSubscriberDb({ subscriber: 'audit' }) };
  const token = options.token === undefined ? TOKEN : options.token;
  const s = await createTestService(
    { ROLES: 'api,consumers', NATS_URL: nats().url, ...streamEnv(stream), CONSUMER_MAX_DELIVER: '2', ...(token ? { ADMIN_TOKEN: token } : {}) },
    // the role closes what it opens: a client of its own over each (already migrated) database
    {
      modules: options.modules ?? fixtureModules,
      ...(options.log ? { log: options.log } : {}),
      openSubscriberDb: async (name) => createClient({ url: sdb[name as keyof typeof sdb].url, timeout: 5000 }),
    },
  );
  const close = async () => {
    await s.close();
    sdb.balances.close();
    sdb.audit.close();
  };
  return { ...s, stream, sdb, close, [Symbol.asyncDispose]: close };
}

const get = async <T>(app: { request: (p: string, i?: RequestInit) => Response | Promise<Response> }, path: string): Promise<T> => {
  const res = await app.request(path, { headers: auth });
  expect(res.status, `GET ${path}`).toBe(200);
  return (await res.json()) as T;
};
const send = (app: { request: (p: string, i?: RequestInit) => Response | Promise<Response> }, method: string, path: string) =>
  app.request(path, { method, headers: auth });

describe('admin - authentication', () => {
  it('the admin routes do not exist without ADMIN_TOKEN', async () => {
    await using s = await startService({ token: null });
    for (const path of ['/admin/subscribers', '/admin/subscribers/balances/dead-letters', '/admin/outbox/failed']) {
      await expectProblem(await s.app.request(path, { headers: auth }), 404);
    }
  });

  it('answers a missing, malformed or wrong token with a 401 problem and WWW-Authenticate: Bearer, and the right one with 200', async () => {
    await using s = await startService();
    const refused: Array<Record<string, string>> = [
      {},
      { Authorization: 'Bearer nope-nope-nope-nope' },
      { Authorization: `Basic ${TOKEN}` },
      { Authorization: 'Bearer not a token!' },
      { Authorization: `Bearer ${TOKEN}x` },
    ];
    for (const path of ['/admin/subscribers', '/admin/subscribers/balances/dead-letters', '/admin/outbox/failed']) {
      for (const headers of refused) {
        const res = await s.app.request(path, { headers });
        await expectProblem(res, 401);
        expect(res.headers.get('WWW-Authenticate')).toBe('Bearer');
      }
    }
    for (const [method, path] of [
      ['POST', '/admin/outbox/failed/retry-all'],
      ['POST', '/admin/subscribers/balances/dead-letters/replay-all'],
      ['DELETE', '/admin/subscribers/balances/dead-letters?confirm=all'],
    ] as const) {
      await expectProblem(await s.app.request(path, { method, headers: { Authorization: 'Bearer nope-nope-nope-nope' } }), 401);
    }
    expect(await get(s.app, '/admin/subscribers')).toEqual({
      items: [
        { name: 'balances', deadLetters: 0 },
        { name: 'audit', deadLetters: 0 },
      ],
    });
    expect(await get(s.app, '/admin/outbox/failed')).toEqual({ items: [], next: null });
  });

  it('refuses at start-up an ADMIN_TOKEN no bearer header can carry', () => {
    expect(() => requireBearer('sixteen or more characters with spaces')).toThrow(ConfigError);
  });
});

describe('admin - dead letters', () => {
  it('lists dead letters with payload and error, filters by type and error text, and pages oldest first without duplicates or gaps, even across a deletion', async () => {
    const warnings: Array<Record<string, unknown>> = [];
    const log = createLogger('warn', (line) => warnings.push(JSON.parse(line)));
    await using s = await startService({ log });
    const unregistered = Array.from({ length: 4 }, () => ({ ...creditedEvent(), type: 'account.frozen.v1' }));
    const invalid = Array.from({ length: 3 }, () => {
      const e = creditedEvent();
      return { ...e, data: { ...e.data, amountCents: -5 } };
    });
    await publishEvents(nats().nc, s.stream, [...unregistered, ...invalid]);
    await publishRaw(nats().nc, s.stream, '{"eventId": "truncated', 'not-json-msg', { aggregateType: 'account', aggregateId: 'broken' });
    await publishEvents(nats().nc, s.stream, [creditedEvent({ owner: 'fine' })]);
    for (const db of [s.sdb.balances, s.sdb.audit])
      await eventually(async () => (await countRows(db.client, 'dead_letters')) === 8, { what: 'eight dead letters' });
    expect(await get(s.app, '/admin/subscribers')).toEqual({
      items: [
        { name: 'balances', deadLetters: 8 },
        { name: 'audit', deadLetters: 8 },
      ],
    });

    const base = '/admin/subscribers/balances/dead-letters';
    const all = await get<Page<DeadLetterItem>>(s.app, base);
    expect(all.next).toBeNull();
    expect(all.items).toHaveLength(8);
    const deadAts = all.items.map((d) => Date.parse(d.deadAt));
    expect(deadAts).toEqual([...deadAts].sort((a, b) => a - b));
    const byId = new Map(all.items.map((d) => [d.eventId, d]));
    const frozen = unregistered[0]!;
    expect(byId.get(frozen.eventId)).toMatchObject({
      subject: `${s.stream.prefix}.account.${frozen.aggregateId}.${partitionOf('account', frozen.aggregateId, 16)}`,
      type: 'account.frozen.v1',
      payload: frozen,
      deliveries: 1,
      error: expect.stringMatching(/not registered/),
      headers: expect.objectContaining({ 'Nats-Msg-Id': frozen.eventId }),
    });
    expect(byId.get(invalid[0]!.eventId)).toMatchObject({
      type: 'account.credited.v1',
      payload: invalid[0],
      error: expect.stringMatching(/Invalid account\.credited\.v1/),
    });
    expect(byId.get('not-json-msg')).toMatchObject({ type: null, payload: '{"eventId": "truncated', error: expect.stringMatching(/not JSON/) });

    const ids = (page: Page<DeadLetterItem>) => page.items.map((d) => d.eventId).sort();
    expect(ids(await get(s.app, `${base}?type=account.frozen.v1`))).toEqual(unregistered.map((e) => e.eventId).sort());
    expect(ids(await get(s.app, `${base}?type=account.credited.v1`))).toEqual(invalid.map((e) => e.eventId).sort());
    expect(ids(await get(s.app, `${base}?q=NOT%20JSON`))).toEqual(['not-json-msg']);
    expect(ids(await get(s.app, `${base}?type=account.frozen.v1&q=invalid`))).toEqual([]);

    // page by three; the first item of the first page is deleted before the second page is read
    const seen: string[] = [];
    let page = await get<Page<DeadLetterItem>>(s.app, `${base}?limit=3`);
    const sizes = [page.items.length];
    seen.push(...page.items.map((d) => d.eventId));
    expect(await (await send(s.app, 'DELETE', `${base}/${encodeURIComponent(seen[0]!)}`)).json()).toEqual({ deleted: 1 });
    while (page.next !== null) {
      page = await get<Page<DeadLetterItem>>(s.app, `${base}?limit=3&after=${page.next}`);
      sizes.push(page.items.length);
      seen.push(...page.items.map((d) => d.eventId));
    }
    expect(sizes).toEqual([3, 3, 2]);
    expect(seen).toEqual(all.items.map((d) => d.eventId));

    await expectProblem(await send(s.app, 'DELETE', `${base}/${encodeURIComponent(seen[0]!)}`), 404);
    for (const bad of ['limit=0', 'limit=1001', 'limit=x', 'limit=+5', 'limit=1000.0', 'limit=%205', 'limit=0x10', 'limit=', 'after=not-a-cursor'])
      await expectProblem(await s.app.request(`${base}?${bad}`, { headers: auth }), 400);
    await expectProblem(await s.app.request('/admin/subscribers/billing/dead-letters', { headers: auth }), 404);
    await expectProblem(await send(s.app, 'POST', '/admin/subscribers/billing/dead-letters/replay-all'), 404);

    await expectProblem(await send(s.app, 'DELETE', base), 400);
    await expectProblem(await send(s.app, 'DELETE', `${base}?confirm=yes`), 400);
    expect(await countRows(s.sdb.balances.client, 'dead_letters')).toBe(7);
    expect(await (await send(s.app, 'DELETE', `${base}?confirm=all`)).json()).toEqual({ deleted: 7 });
    const deletions = warnings.filter((w) => w.msg === 'dead letters deleted by an operator');
    expect(deletions.map((w) => [w.consumer, [...(w.eventIds as string[])].sort()])).toEqual([
      ['balances', [seen[0]]],
      ['balances', seen.slice(1).sort()],
    ]);
    expect(await get(s.app, '/admin/subscribers')).toEqual({
      items: [
        { name: 'balances', deadLetters: 0 },
        { name: 'audit', deadLetters: 8 },
      ],
    });
  });

  it('replays one dead letter and then all of them through the inbox once the handler works: each effect applied once, the dead letters gone', async () => {
    let broken = true;
    // balances, whose credits fail until the test repairs them
    const ledger = defineSubscriber<FixtureEvents>()({
      name: 'balances',
      on: {
        'account.credited.v1': async (tx, e) => {
          if (broken) throw new Error('ledger offline');
          await balances.handle(tx, e);
        },
      },
    });
    const modules = defineModules({ events: fixtureEvents, contexts: [accountsContext], subscribers: [ledger, audit] });
    await using s = await startService({ modules });
    const credits = [10, 20, 40].map((amountCents) => creditedEvent({ owner: 'replayed', amountCents }));
    await publishEvents(nats().nc, s.stream, credits);
    await eventually(async () => (await countRows(s.sdb.balances.client, 'dead_letters')) === 3, { what: 'three dead letters after max_deliver failures' });
    const base = '/admin/subscribers/balances/dead-letters';
    const listed = await get<Page<DeadLetterItem>>(s.app, `${base}?q=ledger%20offline`);
    // oldest first; dead letters of one batch share their time and follow in event id order
    const order = listed.items.map((d) => d.eventId);
    expect([...order].sort()).toEqual(credits.map((e) => e.eventId).sort());
    expect(listed.items.every((d) => d.deliveries === 2)).toBe(true);

    // still broken: the replay fails, the dead letters stay with the new error
    const failing = (await (await send(s.app, 'POST', `${base}/replay-all`)).json()) as { failed: Array<{ eventId: string; error: string }> };
    expect(failing.failed.map((f) => f.eventId)).toEqual(order);
    expect((await get<Page<DeadLetterItem>>(s.app, `${base}?q=replay%20failed`)).items).toHaveLength(3);

    broken = false;
    const [first, ...rest] = order;
    const centsOf = (id: string | undefined) => credits.find((e) => e.eventId === id)!.data.amountCents;
    const one = await send(s.app, 'POST', `${base}/${first}/replay`);
    expect(await one.json()).toEqual({ replayed: [first], duplicates: [], failed: [], notFound: [] });
    expect(await readOwnerBalance(s.sdb.balances.db, 'replayed')).toMatchObject({ creditedCents: centsOf(first) });
    await expectProblem(await send(s.app, 'POST', `${base}/${first}/replay`), 404);
    expect(await readOwnerBalance(s.sdb.balances.db, 'replayed')).toMatchObject({ creditedCents: centsOf(first) });

    const all = await send(s.app, 'POST', `${base}/replay-all`);
    expect(await all.json()).toEqual({ replayed: rest, duplicates: [], failed: [], notFound: [] });
    expect(await readOwnerBalance(s.sdb.balances.db, 'replayed')).toMatchObject({ creditedCents: 70 });
    expect(await get(s.app, base)).toEqual({ items: [], next: null });
    expect(
      await countRows(
        s.sdb.balances.client,
        'inbox',
        'event_id IN (?, ?, ?)',
        credits.map((e) => e.eventId),
      ),
    ).toBe(3);
    expect(await (await send(s.app, 'POST', `${base}/replay-all`)).json()).toEqual({ replayed: [], duplicates: [], failed: [], notFound: [] });
  });
});

describe('admin - failed outbox rows', () => {
  it('lists failed rows with their payload oldest first in pages by seq, and re-queues one or all of them', async () => {
    await using s = await createTestService({ ROLES: 'api', ADMIN_TOKEN: TOKEN, NATS_URL: nats().url, ...streamEnv(ownStream('ADMO')) });
    const events = Array.from({ length: 5 }, (_, i) => creditedEvent({ owner: `failed-${i}` }));
    for (const [i, e] of events.entries()) {
      await s.client.execute({
        sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, attempts, last_error, occurred_at, available_at)
              VALUES (?, 'account', ?, ?, ?, ?, 5, 'broker refused', 0, 0)`,
        args: [e.eventId, e.aggregateId, e.type, JSON.stringify(e), i === 2 ? 'sent' : 'failed'],
      });
    }
    const failed = events.filter((_, i) => i !== 2);

    const first = await get<Page<FailedItem>>(s.app, '/admin/outbox/failed?limit=3');
    expect(first.items.map((r) => r.id)).toEqual(failed.slice(0, 3).map((e) => e.eventId));
    expect(first.items[0]).toMatchObject({ messageType: 'account.credited.v1', attempts: 5, lastError: 'broker refused', payload: failed[0] });
    expect(first.next).toBe(first.items[2]!.seq);
    const second = await get<Page<FailedItem>>(s.app, `/admin/outbox/failed?limit=3&after=${first.next}`);
    expect(second).toMatchObject({ items: [{ id: failed[3]!.eventId, payload: failed[3] }], next: null });
    for (const bad of [
      'limit=0',
      'limit=1001',
      'after=-1',
      'after=x',
      'after=%20',
      'after=',
      'after=0b1',
      'after=1e3',
      'after=1.5',
      'after=9007199254740993',
      'limit=3.0',
    ])
      await expectProblem(await s.app.request(`/admin/outbox/failed?${bad}`, { headers: auth }), 400);

    expect(await (await send(s.app, 'POST', `/admin/outbox/failed/${failed[0]!.eventId}/retry`)).json()).toEqual({ requeued: 1 });
    await expectProblem(await send(s.app, 'POST', `/admin/outbox/failed/${failed[0]!.eventId}/retry`), 404);
    await expectProblem(await send(s.app, 'POST', `/admin/outbox/failed/${events[2]!.eventId}/retry`), 404);
    expect(await (await send(s.app, 'POST', '/admin/outbox/failed/retry-all')).json()).toEqual({ requeued: 3 });
    expect(await get(s.app, '/admin/outbox/failed')).toEqual({ items: [], next: null });
    expect(await countRows(s.client, 'outbox', "status = 'pending' AND available_at = 0")).toBe(4);
  });
});

describe('admin - query plans', () => {
  it('pages through an index range, never sorting: dead letters by idx_dead_letters_consumer_dead_at, failed rows by idx_outbox_status_seq', async () => {
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    await using t = await createTestDb();
    // the text guards read the database's encoding in uncorrelated subqueries (once per statement, not per row): left out
    const plan = async (client: typeof t.client, sql: string, args: InArgs) =>
      (await client.execute({ sql: `EXPLAIN QUERY PLAN ${sql}`, args })).rows
        .map((r) => String(r.detail))
        .filter(
          (d, i, all) => !/^SCALAR SUBQUERY \d+$/.test(d) && !(/^SCAN pragma_encoding VIRTUAL TABLE/.test(d) && /^SCALAR SUBQUERY/.test(all[i - 1] ?? '')),
        );
    const dead = await plan(sdb.client, DEAD_LETTER_PAGE_SQL, { consumer: 'balances', afterAt: 5, afterId: 'x', type: 'a.b.v1', q: 'boom', limit: 101 });
    const failed = await plan(t.client, FAILED_PAGE_SQL, [7, 101]);
    expect(dead, dead.join('\n')).toEqual([
      expect.stringMatching(/^SEARCH dead_letters USING INDEX idx_dead_letters_consumer_dead_at \(consumer=\? AND \(dead_at,event_id\)>\(\?,\?\)\)/),
    ]);
    expect(failed, failed.join('\n')).toEqual([expect.stringMatching(/^SEARCH outbox USING INDEX idx_outbox_status_seq \(status=\? AND seq>\?\)/)]);
  });
});
