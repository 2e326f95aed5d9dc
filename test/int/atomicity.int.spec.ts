import { createClient, type Client } from '@libsql/client';
import { sql } from 'drizzle-orm';
import { z } from 'zod';
import { afterEach, describe, expect, it } from 'vitest';
import type { Tx } from '../../src/db/open-database.ts';
import { defineEvents } from '../../src/events/define-events.ts';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { createEventRegistry, InvalidEventError, UnknownEventTypeError } from '../../src/events/registry.ts';
import { createCommand } from '../../src/http/command-route.ts';
import { appendToOutbox } from '../../src/outbox/append-to-outbox.ts';
import { accountCommands } from '../support/accounts.ts';
import { countRows, createTestApp, createTestDb, tableCounts, type TestDb } from '../support/db.ts';
import { openAccount } from '../support/fixture/accounts/commands.ts';
import { fixtureEvents } from '../support/fixture/modules.ts';
import { postJson } from '../support/http.ts';

const EMPTY = { accounts: 0, outbox: 0, idempotency_keys: 0 };
const T0 = Date.parse('2026-03-01T10:00:00.000Z');

/** A clock that advances 1 ms per call, so every command has its own, predictable time. */
function steppingClock(start = T0): () => Date {
  let t = start;
  return () => new Date(t++);
}

/** The fixture's registry, with the schema of `type` rejecting every payload. */
function registryRejecting(type: keyof typeof fixtureEvents) {
  return createEventRegistry(defineEvents({ ...fixtureEvents, [type]: { aggregate: 'account', data: z.never() } }));
}

const OutboxRow = z.object({
  seq: z.number(),
  id: z.string(),
  aggregate_type: z.string(),
  aggregate_id: z.string(),
  message_type: z.string(),
  payload: z.string(),
  headers: z.string(),
  status: z.string(),
  attempts: z.number(),
  last_error: z.string().nullable(),
  occurred_at: z.number(),
  available_at: z.number(),
  sent_at: z.number().nullable(),
});

async function outboxRows(client: Client) {
  const rs = await client.execute('SELECT * FROM outbox ORDER BY seq');
  return rs.rows.map((r) => OutboxRow.parse({ ...r }));
}

const clients: Client[] = [];
/** A second connection to the same file: it sees only committed data. */
function otherConnection(t: TestDb): Client {
  const c = createClient({ url: t.url, timeout: 5000 });
  clients.push(c);
  return c;
}
afterEach(() => {
  for (const c of clients.splice(0)) c.close();
});

describe('atomicity - a failure inside the transaction', () => {
  it('an event rejected by the registry leaves neither the state nor any outbox row', async () => {
    await using t = await createTestDb({ deps: { registry: registryRejecting('account.opened.v1') } });
    await expect(accountCommands(t.deps).open()).rejects.toBeInstanceOf(InvalidEventError);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });

  it('a failure after the outbox insert leaves neither the state nor its events', async () => {
    await using t = await createTestDb();
    let seenInside = -1;
    const write = t.deps.writer.write(async (tx) => {
      await openAccount(tx, { owner: 'ann' }, createCommand(tx, t.deps));
      // Prove the injection point really is after the outbox insert.
      seenInside = Number((await tx.all<{ n: number }>(sql`SELECT count(*) AS n FROM outbox`))[0]!.n);
      throw new Error('boom');
    });
    await expect(write).rejects.toThrow('boom');
    expect(seenInside).toBe(1);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });

  it('a later event rejected by the registry leaves the aggregate at its earlier version with only its earlier event', async () => {
    await using t = await createTestDb();
    const id = await accountCommands(t.deps).open();
    await expect(accountCommands({ ...t.deps, registry: registryRejecting('account.closed.v1') }).close(id)).rejects.toBeInstanceOf(InvalidEventError);
    const row = (await t.client.execute({ sql: 'SELECT status, version FROM accounts WHERE id = ?', args: [id] })).rows[0]!;
    expect({ ...row }).toEqual({ status: 'open', version: 1 });
    expect((await outboxRows(t.client)).map((r) => r.message_type)).toEqual(['account.opened.v1']);
  });

  it('an HTTP command whose event is rejected answers a problem and stores nothing', async () => {
    await using t = await createTestApp({ deps: { registry: registryRejecting('account.opened.v1') } });
    const res = await postJson(t.app, '/accounts', { owner: 'ann' }, { 'idempotency-key': 'k-1' });
    expect(res.status).toBe(500);
    expect(res.headers.get('content-type')).toBe('application/problem+json');
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });
});

describe('atomicity - a successful command', () => {
  it('stores the state and exactly its outbox row: pending, attempts 0, payload = the integration event with eventId = outbox id', async () => {
    await using t = await createTestDb({ deps: { clock: () => new Date(T0) } });
    const id = await accountCommands(t.deps).open('ann');
    expect(await tableCounts(t.client)).toEqual({ accounts: 1, outbox: 1, idempotency_keys: 0 });

    const [row] = await outboxRows(t.client);
    expect(row).toMatchObject({
      aggregate_type: 'account',
      aggregate_id: id,
      message_type: 'account.opened.v1',
      headers: '{}',
      status: 'pending',
      attempts: 0,
      last_error: null,
      occurred_at: T0,
      available_at: T0,
      sent_at: null,
    });
    expect(JSON.parse(row!.payload)).toEqual({
      eventId: row!.id,
      type: 'account.opened.v1',
      aggregateType: 'account',
      aggregateId: id,
      aggregateVersion: 1,
      occurredAt: new Date(T0).toISOString(),
      data: { accountId: id, owner: 'ann' },
    });
    // The stored payload is exactly what the registry accepts (the relay will re-validate it).
    expect(() => t.deps.registry.parse(JSON.parse(row!.payload))).not.toThrow();
  });

  it('numbers outbox rows in commit order, with aggregate versions counting the events of each aggregate', async () => {
    await using t = await createTestDb({ deps: { clock: steppingClock() } });
    const accounts = accountCommands(t.deps);
    const a = await accounts.open('a');
    const b = await accounts.open('b');
    expect(await accounts.deposit(a, 250)).toMatchObject({ status: 200 });
    const c = await accounts.open('c');
    expect(await accounts.close(a)).toMatchObject({ status: 200 });

    const rows = await outboxRows(t.client);
    expect(rows.map((r) => [r.aggregate_id, r.message_type])).toEqual([
      [a, 'account.opened.v1'],
      [b, 'account.opened.v1'],
      [a, 'account.credited.v1'],
      [c, 'account.opened.v1'],
      [a, 'account.closed.v1'],
    ]);
    const seqs = rows.map((r) => r.seq);
    expect(seqs).toEqual([...seqs].sort((x, y) => x - y));
    expect(new Set(seqs).size).toBe(seqs.length);

    const ofA = rows.filter((r) => r.aggregate_id === a).map((r) => t.deps.registry.parse(JSON.parse(r.payload)));
    expect(ofA.map((e) => [e.type, e.aggregateVersion])).toEqual([
      ['account.opened.v1', 1],
      ['account.credited.v1', 2],
      ['account.closed.v1', 3],
    ]);
    expect(ofA[2]).toMatchObject({ eventId: rows[4]!.id, data: { accountId: a, owner: 'a', balanceCents: 250 } });
    for (const r of rows) expect(r).toMatchObject({ status: 'pending', attempts: 0 });
    expect(new Set(rows.map((r) => r.id)).size).toBe(rows.length);

    const stored = (await t.client.execute({ sql: 'SELECT status, version, balance_cents FROM accounts WHERE id = ?', args: [a] })).rows[0]!;
    expect({ ...stored }).toEqual({ status: 'closed', version: 3, balance_cents: 250 });
  });

  it("carries the request's trace (continued by its server span) and correlation id into the outbox headers", async () => {
    await using t = await createTestApp();
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const res = await postJson(t.app, '/accounts', { owner: 'ann' }, { traceparent, 'x-correlation-id': 'corr-42' });
    expect(res.status).toBe(201);
    const [row] = await outboxRows(t.client);
    const headers = JSON.parse(row!.headers) as { traceparent: string; correlationId: string };
    // same trace and flags; the parent is the server span, not the caller's span
    expect(headers.traceparent).toMatch(/^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-01$/);
    expect(headers.traceparent).not.toBe(traceparent);
    expect(headers.correlationId).toBe('corr-42');
  });

  it('outbox rows stay invisible to other connections until the transaction commits', async () => {
    await using t = await createTestDb();
    const other = otherConnection(t);
    let seenOutside = -1;
    await t.deps.writer.write(async (tx) => {
      await openAccount(tx, { owner: 'ann' }, createCommand(tx, t.deps));
      seenOutside = await countRows(other, 'outbox');
    });
    expect(seenOutside).toBe(0);
    expect(await countRows(other, 'outbox')).toBe(1);
  });
});

describe('atomicity - appendToOutbox refuses what cannot be published', () => {
  const valid = (over: Partial<IntegrationEvent> = {}): IntegrationEvent => ({
    eventId: crypto.randomUUID(),
    type: 'account.closed.v1',
    aggregateType: 'account',
    aggregateId: 'account-1',
    aggregateVersion: 2,
    occurredAt: '2026-03-01T10:00:00.000Z',
    data: { accountId: 'account-1', owner: 'ann', balanceCents: 10 },
    ...over,
  });

  async function append(t: TestDb, events: IntegrationEvent[]): Promise<void> {
    await t.deps.writer.write((tx: Tx) => appendToOutbox(tx, events, { registry: t.deps.registry, now: new Date(T0) }));
  }

  it('stores a valid event (the baseline the refusals below differ from)', async () => {
    await using t = await createTestDb();
    await append(t, [valid()]);
    expect((await tableCounts(t.client)).outbox).toBe(1);
  });

  it('refuses an unregistered type and stores nothing', async () => {
    await using t = await createTestDb();
    await expect(append(t, [valid({ type: 'account.frozen.v1' })])).rejects.toBeInstanceOf(UnknownEventTypeError);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });

  it('refuses a payload that fails its registered schema and stores nothing', async () => {
    await using t = await createTestDb();
    await expect(append(t, [valid({ data: { accountId: 'account-1' } })])).rejects.toBeInstanceOf(InvalidEventError);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });

  it('refuses an aggregate type other than the one its type is registered with, and stores nothing', async () => {
    await using t = await createTestDb();
    await expect(append(t, [valid({ aggregateType: 'ledger' })])).rejects.toThrow(/must be "account" for account\.closed\.v1/);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });

  it.each([
    ['a dot', 'account.1'],
    ['a star', 'account*'],
    ['a greater-than', 'account>'],
    ['a space', 'account 1'],
    ['a tab', 'account\t1'],
    ['a newline', 'account\n1'],
    ['a control character', 'account\u00011'],
    ['an empty string', ''],
  ])('refuses an aggregate id containing %s and stores nothing', async (_label, aggregateId) => {
    await using t = await createTestDb();
    await expect(append(t, [valid({ aggregateId })])).rejects.toBeInstanceOf(InvalidEventError);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });

  it('refuses an aggregate type that is not a subject token', async () => {
    await using t = await createTestDb();
    await expect(append(t, [valid({ aggregateType: 'account.v1' })])).rejects.toBeInstanceOf(InvalidEventError);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });

  it('refuses the whole batch when one event of it is bad', async () => {
    await using t = await createTestDb();
    await expect(append(t, [valid(), valid({ aggregateId: 'x>y' })])).rejects.toBeInstanceOf(InvalidEventError);
    expect(await tableCounts(t.client)).toEqual(EMPTY);
  });
});

describe('atomicity - group-commit writer', () => {
  it('concurrent writes where one throws: the others commit, the thrower is rolled back, each promise gets its own result', async () => {
    await using t = await createTestDb();
    const other = otherConnection(t);
    const visibleOutsideWhileGrouped: number[] = [];
    const boom = new Error('boom in job 2');
    const jobs = [0, 1, 2, 3, 4].map((i) =>
      t.deps.writer.write(async (tx) => {
        const outcome = await openAccount(tx, { owner: `owner-${i}` }, createCommand(tx, t.deps));
        // Queued in the same tick, the jobs share one transaction: earlier jobs are not yet visible outside.
        visibleOutsideWhileGrouped.push(await countRows(other, 'accounts'));
        if (i === 2) throw boom;
        return { i, id: z.object({ accountId: z.string() }).parse('body' in outcome ? outcome.body : {}).accountId };
      }),
    );
    const settled = await Promise.allSettled(jobs);

    // the group ran optimistically up to the thrower, rolled back, and ran again with a savepoint per job
    expect(visibleOutsideWhileGrouped).toEqual([0, 0, 0, 0, 0, 0, 0, 0]);
    expect(settled.map((s) => s.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
    expect(settled[2]).toEqual({ status: 'rejected', reason: boom });
    const ok = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
    expect(ok.map((v) => v.i)).toEqual([0, 1, 3, 4]);

    const stored = (await other.execute('SELECT id, owner FROM accounts ORDER BY owner')).rows.map((r) => [r[0], r[1]]);
    expect(stored).toEqual(ok.map((v) => [v.id, `owner-${v.i}`]));
    const outbox = (await other.execute('SELECT aggregate_id FROM outbox ORDER BY seq')).rows.map((r) => r[0]);
    expect(outbox).toEqual(ok.map((v) => v.id));
    expect(await tableCounts(t.client)).toEqual({ accounts: 4, outbox: 4, idempotency_keys: 0 });
  });

  it('answers a grouped write only after its commit is visible to other connections', async () => {
    await using t = await createTestDb();
    const other = otherConnection(t);
    const accounts = accountCommands(t.deps);
    const seenAtResolve = await Promise.all([0, 1, 2].map(async (i) => countRows(other, 'outbox', 'aggregate_id = ?', [await accounts.open(`c${i}`)])));
    expect(seenAtResolve).toEqual([1, 1, 1]);
  });

  it('a write queued after a failed one still commits', async () => {
    await using t = await createTestDb();
    await expect(t.deps.writer.write(async () => Promise.reject(new Error('first fails')))).rejects.toThrow('first fails');
    await accountCommands(t.deps).open();
    await t.deps.writer.idle();
    expect((await tableCounts(t.client)).accounts).toBe(1);
  });
});
