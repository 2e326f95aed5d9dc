// Hostile edges of the tracing changes in the writer and the relay, over real libSQL files and a private nats-server:
// per-aggregate order with odd stored headers in a backlog, the tracestate size allowance, group commit across trace
// contexts with a context manager, handlers that play with the active context, and undecodable trace header bytes over HTTP.
import { createConnection } from 'node:net';
import { serve } from '@hono/node-server';
import { context, createContextKey, ROOT_CONTEXT, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { afterEach, describe, expect, it } from 'vitest';
import { createApp } from '../../src/app.ts';
import { sqlOf } from '../../src/db/open-database.ts';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { fixtureModules } from '../support/fixture/modules.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { postJson } from '../support/http.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { freshStream, ownStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

const TRACEPARENT_OK = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
/** A valid W3C tracestate of exactly 512 characters (two members of ≤ 256 characters each). */
const TRACESTATE_512 = `a=${'x'.repeat(254)},b=${'y'.repeat(253)}`;

let seq = 0;
/** Inserts a pending outbox row for `event` with the raw `headers` column text. */
async function insertRow(t: TestDb, event: IntegrationEvent, headers: string): Promise<void> {
  await t.client.execute({
    sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, headers, status, occurred_at, available_at)
          VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, 0)`,
    args: [event.eventId, event.aggregateType, event.aggregateId, event.type, JSON.stringify(event), headers],
  });
}

const opened = (accountId: string, version = 1, owner = 'odd'): IntegrationEvent => ({
  eventId: crypto.randomUUID(),
  type: 'account.opened.v1',
  aggregateType: 'account',
  aggregateId: accountId,
  aggregateVersion: version,
  occurredAt: new Date(Date.UTC(2026, 0, 1, 0, 0, 0, ++seq)).toISOString(),
  data: { accountId, owner },
});

async function outboxRows(t: TestDb) {
  const { rows } = await t.client.execute('SELECT id, aggregate_id, status, attempts, last_error FROM outbox ORDER BY seq');
  return rows.map((r) => ({ id: String(r.id), agg: String(r.aggregate_id), status: String(r.status), attempts: Number(r.attempts), lastError: r.last_error }));
}

describe('relay - per-aggregate order in a backlog of many batches, odd stored headers interleaved', () => {
  it('publishes every row of each aggregate once and in seq order when 512-char tracestates, invalid JSON and non-object headers alternate with normal ones', async () => {
    await using t = await createTestDb();
    const stream = ownStream('EDGE');
    const variants = [
      JSON.stringify({ traceparent: TRACEPARENT_OK, correlationId: 'c-1' }),
      JSON.stringify({ traceparent: TRACEPARENT_OK, tracestate: TRACESTATE_512, correlationId: 'c'.repeat(128) }),
      '{"traceparent":',
      'null',
      '',
      JSON.stringify({ traceparent: TRACEPARENT_OK, tracestate: 'x'.repeat(600) }),
      JSON.stringify({ traceparent: `${TRACEPARENT_OK}\r\nX-Evil: 1`, tracestate: 'é=ü' }),
    ];
    const aggregates = ['agg-a', 'agg-b', 'agg-c'];
    const expected = new Map<string, string[]>();
    for (let i = 0; i < 60; i++) {
      const agg = aggregates[i % aggregates.length]!;
      const e = opened(agg, Math.floor(i / aggregates.length) + 1);
      expected.set(agg, [...(expected.get(agg) ?? []), e.eventId]);
      await insertRow(t, e, variants[i % variants.length]!);
    }
    const summary = await drainOutbox(relayDeps(t, nats().url, { stream, settings: { batch: 7, maxInFlight: 4, maxAttempts: 1 } }));
    expect(summary).toMatchObject({ published: 60, failed: 0, parked: 0 });
    const msgs = await readStream(nats().nc, stream);
    expect(msgs).toHaveLength(60);
    for (const agg of aggregates) {
      expect(
        msgs.filter((m) => m.headers['Aggregate-Id'] === agg).map((m) => m.headers['Nats-Msg-Id']),
        `order of ${agg}`,
      ).toEqual(expected.get(agg));
    }
    expect(msgs.every((m) => !('X-Evil' in m.headers))).toBe(true);
  });
});

describe("relay - a caller's tracestate is dropped rather than park a row, whatever the length of the event's ids", () => {
  const MAX = 2048;
  // The longest aggregate id the envelope allows (SubjectToken: 128 characters).
  const LONG_ID = `acc-${'L'.repeat(124)}`;
  /** The largest event the relay's check lets through WITH the tracestate: payload + 512 + id + tracestate + 14 = max. */
  const largestWithTracestate = (version: number): IntegrationEvent => {
    const event = opened(LONG_ID, version, 'o');
    const fill = MAX - 512 - event.eventId.length - TRACESTATE_512.length - 14 - JSON.stringify(event).length;
    const big: IntegrationEvent = { ...event, data: { accountId: LONG_ID + 'w'.repeat(fill), owner: 'o' } };
    expect(JSON.stringify(big).length + 512 + big.eventId.length + TRACESTATE_512.length + 14).toBe(MAX);
    return big;
  };

  it('control: the same event without a tracestate is published (the message fits the stream without it)', async () => {
    await using t = await createTestDb();
    const stream = await freshStream(nats().nc, 'LONGID', { maxMsgSize: MAX });
    await insertRow(t, largestWithTracestate(1), JSON.stringify({ traceparent: TRACEPARENT_OK, correlationId: 'c'.repeat(128) }));
    const summary = await drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxAttempts: 1, maxMsgSize: MAX } }));
    expect(summary).toMatchObject({ published: 1, parked: 0 });
  });

  it('a row of an aggregate with a 128-character id, a 128-character correlation id and a 512-character tracestate is published (tracestate dropped if need be), and the later rows of its aggregate follow', async () => {
    await using t = await createTestDb();
    const stream = await freshStream(nats().nc, 'LONGID', { maxMsgSize: MAX });
    const first = opened(LONG_ID, 1);
    const big = largestWithTracestate(2);
    const third = opened(LONG_ID, 3);
    await insertRow(t, first, JSON.stringify({ traceparent: TRACEPARENT_OK }));
    await insertRow(t, big, JSON.stringify({ traceparent: TRACEPARENT_OK, tracestate: TRACESTATE_512, correlationId: 'c'.repeat(128) }));
    await insertRow(t, third, JSON.stringify({ traceparent: TRACEPARENT_OK }));
    const summary = await drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxAttempts: 1, maxMsgSize: MAX } }));
    const rows = await outboxRows(t);
    expect(
      rows.map((r) => ({ status: r.status, lastError: r.lastError })),
      `the relay estimated the fixed headers at 512 bytes, but with a 128-character Aggregate-Id they are larger, so the tracestate it kept pushed the message past max_msg_size; summary ${JSON.stringify(summary)}`,
    ).toEqual([
      { status: 'sent', lastError: null },
      { status: 'sent', lastError: null },
      { status: 'sent', lastError: null },
    ]);
    const msgs = await readStream(nats().nc, stream);
    expect(msgs.map((m) => m.headers['Nats-Msg-Id'])).toEqual([first.eventId, big.eventId, third.eventId]);
  });
});

describe('writer - group commit across trace contexts with a context manager registered', () => {
  afterEach(() => {
    context.disable();
  });

  it('commits each job once, runs each in its caller context (also on the savepoint re-run), rejects only the thrower, and the queue stays in ROOT', async () => {
    const manager = new AsyncLocalStorageContextManager().enable();
    context.setGlobalContextManager(manager);
    await using t = await createTestDb();
    const key = createContextKey('caller');
    const seen = new Map<number, unknown[]>();
    const N = 40;
    const THROWER = 17;
    await t.client.execute('CREATE TABLE edge_marks (n INTEGER PRIMARY KEY)');
    const jobs = Array.from({ length: N }, (_, n) => {
      const ctx = n % 5 === 0 ? ROOT_CONTEXT : ROOT_CONTEXT.setValue(key, n);
      return context.with(ctx, () =>
        t.deps.writer.write(async (tx) => {
          seen.set(n, [...(seen.get(n) ?? []), context.active().getValue(key)]);
          await sqlOf(tx).execute({ sql: 'INSERT INTO edge_marks (n) VALUES (?)', args: [n] });
          await new Promise((r) => setTimeout(r, 0));
          // the context survives an await inside the job
          seen.set(n, [...seen.get(n)!, context.active().getValue(key)]);
          if (n === THROWER) throw new Error('job 17 fails');
          return n;
        }),
      );
    });
    const results = await Promise.allSettled(jobs);
    results.forEach((r, n) => {
      if (n === THROWER) expect(r).toMatchObject({ status: 'rejected' });
      else expect(r, `job ${n}`).toEqual({ status: 'fulfilled', value: n });
    });
    const { rows } = await t.client.execute('SELECT n FROM edge_marks ORDER BY n');
    expect(rows.map((r) => Number(r.n))).toEqual(Array.from({ length: N }, (_, n) => n).filter((n) => n !== THROWER));
    for (const [n, values] of seen) {
      const want = n % 5 === 0 ? undefined : n;
      expect(new Set(values), `job ${n} saw ${JSON.stringify(values)}`).toEqual(new Set([want]));
    }
    // a write queued afterwards from ROOT sees ROOT
    expect(await t.deps.writer.write(async () => context.active().getValue(key))).toBeUndefined();
  });

  it('a job that switches or nests the active context, or leaves an async chain pending, does not stall the queue nor leak its context into later jobs', async () => {
    const manager = new AsyncLocalStorageContextManager().enable();
    context.setGlobalContextManager(manager);
    await using t = await createTestDb();
    const key = createContextKey('leak');
    const leaked = ROOT_CONTEXT.setValue(key, 'leaked');
    let never: Promise<void> | undefined;
    const started = Date.now();
    const a = t.deps.writer.write(async () => {
      // a handler that runs part of its work in another context and starts work it never awaits
      await context.with(leaked, async () => {
        await new Promise((r) => setTimeout(r, 1));
      });
      never = context.with(leaked, () => new Promise<void>(() => undefined));
      return context.active().getValue(key);
    });
    const b = t.deps.writer.write(async () => context.active().getValue(key));
    const c = context.with(trace.setSpanContext(ROOT_CONTEXT, { traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7', traceFlags: 1 }), () =>
      t.deps.writer.write(async () => trace.getSpanContext(context.active())?.spanId),
    );
    expect(await a).toBeUndefined();
    expect(await b).toBeUndefined();
    expect(await c).toBe('00f067aa0ba902b7');
    expect(never).toBeDefined();
    await t.deps.writer.idle();
    expect(Date.now() - started).toBeLessThan(2000);
  });
});

describe('http - trace header bytes that cannot be stored as sent never cause a 500 nor a parked row', () => {
  const HOSTILE: Array<[string, Record<string, string>]> = [
    ['latin-1 in traceparent', { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\u00e9' }],
    ['latin-1 in tracestate', { traceparent: TRACEPARENT_OK, tracestate: 'a=\u00ff\u0080' }],
    ['latin-1 X-Correlation-Id', { 'X-Correlation-Id': 'corr-\u00e9\u00ff', traceparent: TRACEPARENT_OK }],
    ['latin-1 X-Request-Id', { 'X-Request-Id': 'r\u00e9' }],
    ['DEL and tab in tracestate', { traceparent: TRACEPARENT_OK, tracestate: 'a=b\u007f\tc' }],
  ];
  for (const [what, headers] of HOSTILE) {
    it(`in-process request: ${what}`, async () => {
      await using t = await createTestDb();
      const app = createApp(t.deps, { contexts: fixtureModules.contexts });
      const res = await postJson(app, '/accounts', { owner: 'ann' }, headers);
      expect(res.status).toBe(201);
      const stream = ownStream('HB');
      const summary = await drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxAttempts: 1 } }));
      expect(summary).toMatchObject({ published: 1, parked: 0 });
      const [msg] = await readStream(nats().nc, stream);
      expect(msg!.headers.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/);
      for (const v of Object.values(msg!.headers)) expect(v).toMatch(/^[\x20-\x7e]*$/);
    });
  }

  it('raw bytes over a real HTTP server: UTF-8, lone-surrogate encodings, NUL and high bytes in trace headers never give a 500, and every row accepted is published', async () => {
    await using t = await createTestDb();
    const app = createApp(t.deps, { contexts: fixtureModules.contexts });
    const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' });
    await new Promise<void>((r) => (server.listening ? r() : server.once('listening', () => r())));
    const port = (server.address() as { port: number }).port;
    const body = Buffer.from(JSON.stringify({ owner: 'ann' }));
    const send = (extra: Buffer) =>
      new Promise<string>((resolve) => {
        const sock = createConnection({ port, host: '127.0.0.1' });
        const chunks: Buffer[] = [];
        sock.on('data', (d) => chunks.push(d));
        sock.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
        sock.on('error', () => resolve(Buffer.concat(chunks).toString('latin1')));
        sock.write(
          Buffer.concat([
            Buffer.from(`POST /accounts HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n`),
            extra,
            Buffer.from('\r\n'),
            body,
          ]),
        );
      });
    const line = (name: string, value: Buffer) => Buffer.concat([Buffer.from(`${name}: `), value, Buffer.from('\r\n')]);
    const tp = Buffer.from(TRACEPARENT_OK);
    const cases: Buffer[] = [
      line('traceparent', Buffer.from('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0é', 'utf8')),
      Buffer.concat([line('traceparent', tp), line('tracestate', Buffer.from('a=é,b=😀', 'utf8'))]),
      // CESU/WTF-8 bytes of a lone high surrogate U+D800
      Buffer.concat([line('traceparent', tp), line('tracestate', Buffer.from([0x61, 0x3d, 0xed, 0xa0, 0x80]))]),
      Buffer.concat([line('traceparent', tp), line('X-Correlation-Id', Buffer.from([0x63, 0xed, 0xa0, 0x80, 0xff, 0xfe]))]),
      Buffer.concat([line('traceparent', tp), line('tracestate', Buffer.from([0x61, 0x3d, 0x00, 0x62]))]),
      Buffer.concat([line('traceparent', tp), line('X-Correlation-Id', Buffer.from([0x63, 0x00]))]),
      line('X-Request-Id', Buffer.from([0x72, 0xc3, 0xa9, 0x00])),
    ];
    const statuses: number[] = [];
    try {
      for (const c of cases) {
        const raw = await send(c);
        statuses.push(Number(/^HTTP\/1\.1 (\d{3})/.exec(raw)?.[1] ?? 0));
      }
    } finally {
      await new Promise<void>((r) => server.close(() => r()));
    }
    for (const [i, s] of statuses.entries()) {
      expect(s, `case ${i}`).not.toBe(0);
      expect(s, `case ${i}`).toBeLessThan(500);
    }
    const accepted = statuses.filter((s) => s === 201).length;
    const stream = ownStream('HBR');
    const summary = await drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxAttempts: 1 } }));
    expect(summary).toMatchObject({ published: accepted, parked: 0 });
    expect((await outboxRows(t)).every((r) => r.status === 'sent')).toBe(true);
  });
});
