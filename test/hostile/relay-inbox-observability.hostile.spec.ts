// Hostile trace metadata, broker side, over real libSQL files and a private nats-server:
// odd trace headers stored with outbox rows, a hostile tracestate that grows the message past the relay's own size
// estimate, and hostile trace headers on messages published straight to the stream.
import { jetstream } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { describe, expect, it } from 'vitest';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { eventSubject, type StreamSettings } from '../../src/nats/stream-settings.ts';
import { partitionOf } from '../../src/outbox/partition.ts';
import { openedEvent } from '../support/accounts.ts';
import { audit } from '../support/fixture/subscribers/audit/subscriber.ts';
import { createSubscriberDb, testRunner } from '../support/consumer.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { postJson } from '../support/http.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { freshStream, ownStream, readStream } from '../support/stream.ts';
import { createTestService } from '../support/service.ts';
import { useNats } from '../support/use-nats.ts';
import { createApp } from '../../src/app.ts';
import { fixtureModules } from '../support/fixture/modules.ts';

const nats = useNats();

/** Inserts a pending outbox row for `event` with the raw `headers` column text. */
async function insertRow(t: TestDb, event: IntegrationEvent, headers: string): Promise<void> {
  await t.client.execute({
    sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, headers, status, occurred_at, available_at)
          VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, 0)`,
    args: [event.eventId, event.aggregateType, event.aggregateId, event.type, JSON.stringify(event), headers],
  });
}

const opened = (accountId: string): IntegrationEvent => ({
  eventId: crypto.randomUUID(),
  type: 'account.opened.v1',
  aggregateType: 'account',
  aggregateId: accountId,
  aggregateVersion: 1,
  occurredAt: '2026-01-01T00:00:00.000Z',
  data: { accountId, owner: 'odd' },
});

const ODD_HEADERS: Array<[string, string]> = [
  ['empty text', ''],
  ['{}', '{}'],
  ['invalid JSON', '{"traceparent":'],
  ['null', 'null'],
  ['an array', '[]'],
  ['a JSON string', '"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"'],
  ['a JSON number', '5'],
  ['a JSON boolean', 'true'],
  ['traceparent a number', '{"traceparent":5}'],
  ['traceparent garbage, tracestate a control char', '{"traceparent":"garbage","tracestate":"\\u0001"}'],
  ['tracestate an object', '{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":{"a":1}}'],
  ['correlationId a number', '{"correlationId":5}'],
  ['correlationId with CR LF', '{"correlationId":"abc\\r\\nX-Evil: 1"}'],
  ['traceparent with CR LF', '{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\\r\\nX-Evil: 1"}'],
];

describe('relay - rows whose stored headers are odd are still published, never parked', () => {
  for (const [what, headers] of ODD_HEADERS) {
    it(`headers column: ${what}`, async () => {
      await using t = await createTestDb();
      const stream = ownStream('ODD');
      const event = opened(`acc-${crypto.randomUUID()}`);
      await insertRow(t, event, headers);
      const summary = await drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxAttempts: 1 } }));
      expect(summary, `the relay parked a good event because of its headers column ${JSON.stringify(headers)}`).toMatchObject({
        published: 1,
        failed: 0,
        parked: 0,
      });
      const [msg] = await readStream(nats().nc, stream);
      expect(msg!.event.eventId).toBe(event.eventId);
      expect(Object.keys(msg!.headers)).not.toContain('X-Evil');
      expect(msg!.headers.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/);
    });
  }
});

describe('relay - a caller-supplied tracestate never makes a good row unpublishable', () => {
  /** An event exactly as large as the relay's own check lets through (payload + 512 + id <= max_msg_size). */
  const largestAllowed = (max: number): IntegrationEvent => {
    const event = opened('acc-big');
    const fill = max - 512 - event.eventId.length - JSON.stringify(event).length;
    const big: IntegrationEvent = { ...event, data: { accountId: `acc-big${'x'.repeat(fill)}`, owner: 'odd' } };
    expect(JSON.stringify(big).length + 512 + big.eventId.length).toBe(max);
    return big;
  };
  const MAX = 2048;
  const TRACEPARENT_OK = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

  it('control: the largest event the relay lets through, with a traceparent and a 128-character correlation id, is published', async () => {
    await using t = await createTestDb();
    const stream = await freshStream(nats().nc, 'SIZE', { maxMsgSize: MAX });
    await insertRow(t, largestAllowed(MAX), JSON.stringify({ traceparent: TRACEPARENT_OK, correlationId: 'c'.repeat(128) }));
    const summary = await drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxAttempts: 1, maxMsgSize: MAX } }));
    expect(summary).toMatchObject({ published: 1, parked: 0 });
  });

  it("the same event with a caller's 485-character W3C tracestate is published too, not parked as too large", async () => {
    await using t = await createTestDb();
    const stream = await freshStream(nats().nc, 'SIZE', { maxMsgSize: MAX });
    // a valid W3C tracestate as an HTTP caller may send it (≤ 512 printable characters; the next test shows it is stored)
    const tracestate = `a=${'x'.repeat(240)},b=${'y'.repeat(240)}`;
    await insertRow(t, largestAllowed(MAX), JSON.stringify({ traceparent: TRACEPARENT_OK, tracestate, correlationId: 'c'.repeat(128) }));
    const summary = await drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxAttempts: 1, maxMsgSize: MAX } }));
    const { rows } = await t.client.execute('SELECT status, last_error FROM outbox');
    expect(summary, `row: ${JSON.stringify(rows[0])}`).toMatchObject({ published: 1, parked: 0 });
  });

  it('the same tracestate, sent over HTTP, reaches the stored row unchanged (so the relay must account for it)', async () => {
    await using t = await createTestDb();
    const app = createApp(t.deps, { contexts: fixtureModules.contexts });
    const tracestate = `a=${'x'.repeat(240)},b=${'y'.repeat(240)}`;
    const res = await postJson(app, '/accounts', { owner: 'ann' }, { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', tracestate });
    expect(res.status).toBe(201);
    const { rows } = await t.client.execute('SELECT headers FROM outbox');
    expect((JSON.parse(String(rows[0]!.headers)) as { tracestate: string }).tracestate).toBe(tracestate);
  });
});

/** Publishes `event` to `stream` with the raw trace header values given (any key spelling). */
async function publishWithHeaders(stream: StreamSettings, event: IntegrationEvent, extra: Array<[string, string]>) {
  const h = natsHeaders();
  h.set('Content-Type', 'application/json');
  for (const [k, v] of extra) h.append(k, v);
  const subject = eventSubject(stream.prefix, event.aggregateType, event.aggregateId, partitionOf(event.aggregateType, event.aggregateId, 16));
  await jetstream(nats().nc).publish(subject, new TextEncoder().encode(JSON.stringify(event)), { msgID: event.eventId, headers: h });
}

const HOSTILE_MESSAGE_HEADERS: Array<[string, Array<[string, string]>]> = [
  ['version ff', [['traceparent', 'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01']]],
  ['all-zero trace id', [['traceparent', '00-00000000000000000000000000000000-00f067aa0ba902b7-01']]],
  ['upper case', [['traceparent', '00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01']]],
  ['10 kB traceparent', [['traceparent', 'a'.repeat(10_000)]]],
  [
    'unicode',
    [
      ['traceparent', '00-é'],
      ['tracestate', 'ü=ö'],
    ],
  ],
  [
    'two traceparents',
    [
      ['traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'],
      ['traceparent', 'garbage'],
    ],
  ],
  [
    'tracestate 10 kB with commas',
    [
      ['traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'],
      ['tracestate', 'a=b,'.repeat(2500)],
    ],
  ],
  [
    'tracestate of control characters',
    [
      ['traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'],
      ['tracestate', 'a=\x01\x02,b=\x7f'],
    ],
  ],
  [
    'empty values',
    [
      ['traceparent', ''],
      ['tracestate', ''],
    ],
  ],
  ['odd casing of the key', [['TraceParent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01']]],
];

describe('inbox - hostile trace headers on a message are applied once, no retry, no dead letter', () => {
  for (const [what, extra] of HOSTILE_MESSAGE_HEADERS) {
    it(what, async () => {
      await using sdb = await createSubscriberDb();
      const stream = await freshStream(nats().nc, 'HIN');
      const event = openedEvent();
      await publishWithHeaders(stream, event, extra);
      const summary = await testRunner(sdb, nats().url, audit, stream).run({ maxMessages: 1, timeLimitMs: 10_000 });
      expect(summary).toMatchObject({ processed: 1, retried: 0, deadLettered: 0 });
    });
  }
});

describe('service - hostile trace headers end to end through a service with api, relay and consumers', () => {
  it('every command with a hostile traceparent/tracestate is published once and applied once by each subscriber', async () => {
    const stream = await freshStream(nats().nc, 'E2E');
    const sdbs = new Map<string, Awaited<ReturnType<typeof createSubscriberDb>>>();
    const names = ['audit'];
    for (const name of names) sdbs.set(name, await createSubscriberDb({ subscriber: name }));
    const { createClient } = await import('@libsql/client');
    await using s = await createTestService(
      { ROLES: 'api,relay,consumers', CONSUMERS: names.join(','), NATS_URL: nats().url, NATS_STREAM: stream.name, EVENTS_SUBJECT_PREFIX: stream.prefix },
      { openSubscriberDb: async (name) => createClient({ url: sdbs.get(name)!.url, timeout: 5000 }) },
    );
    const hostile = [
      { traceparent: 'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', tracestate: 'a=1' },
      { traceparent: '00-00000000000000000000000000000000-00f067aa0ba902b7-01', tracestate: ',,,' },
      { traceparent: `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01`, tracestate: `a=${'x'.repeat(250)},b=${'y'.repeat(250)}` },
      { traceparent: 'x'.repeat(10_000), tracestate: 'x'.repeat(10_000) },
      { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', tracestate: 'k=v\x01' },
    ];
    for (const h of hostile) expect((await postJson(s.app, '/accounts', { owner: 'ann' }, h)).status).toBe(201);
    const { eventually } = await import('../support/eventually.ts');
    await eventually(async () => Number((await s.client.execute("SELECT count(*) AS n FROM outbox WHERE status = 'sent'")).rows[0]!.n) === hostile.length, {
      what: 'every row sent',
    });
    const audit = sdbs.get('audit')!;
    await eventually(async () => Number((await audit.client.execute('SELECT count(*) AS n FROM inbox')).rows[0]!.n) === hostile.length, {
      what: 'every event applied by audit',
    });
    expect(Number((await audit.client.execute('SELECT count(*) AS n FROM dead_letters')).rows[0]!.n)).toBe(0);
    await s.close();
    for (const sdb of sdbs.values()) sdb.close();
  });
});
