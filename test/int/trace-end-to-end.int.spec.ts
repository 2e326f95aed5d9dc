// One trace from the HTTP command through the outbox row, the relay's publish and each subscriber's applied effect,
// recorded by an in-memory exporter registered as the global tracer provider of this test file.
import { createClient } from '@libsql/client';
import { SpanKind, trace } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSubscriberDb } from '../support/consumer.ts';
import { countRows } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { createTestService } from '../support/service.ts';
import { freshStream, streamEnv } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();
const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });

beforeAll(() => {
  trace.setGlobalTracerProvider(provider);
});
afterAll(async () => {
  await provider.shutdown();
  trace.disable();
});

const INCOMING_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const INCOMING_SPAN = '00f067aa0ba902b7';

/** The api, relay and consumers roles in one service over databases and a stream of their own. */
async function startService() {
  const stream = await freshStream(nats().nc, 'TRACE');
  const sdb = { balances: await createSubscriberDb({ subscriber: 'balances' }), audit: await createSubscriberDb({ subscriber: 'audit' }) };
  const s = await createTestService(
    { ROLES: 'api,relay,consumers', NATS_URL: nats().url, ...streamEnv(stream) },
    { openSubscriberDb: async (name) => createClient({ url: sdb[name as keyof typeof sdb].url, timeout: 5000 }) },
  );
  const close = async () => {
    await s.close();
    sdb.balances.close();
    sdb.audit.close();
  };
  return { ...s, sdb, close, [Symbol.asyncDispose]: close };
}

const spansOf = (traceId: string) => exporter.getFinishedSpans().filter((s) => s.spanContext().traceId === traceId);
const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;

describe('tracing - one trace from the command to the effect', () => {
  it('POST with a traceparent: server span → producer span → one consumer span per subscriber, all in the incoming trace, tracestate kept', async () => {
    await using s = await startService();
    const res = await s.app.request('/accounts', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', traceparent: `00-${INCOMING_TRACE}-${INCOMING_SPAN}-01`, tracestate: 'vendor=abc' },
      body: JSON.stringify({ owner: 'traced' }),
    });
    expect(res.status).toBe(201);
    const { accountId } = (await res.json()) as { accountId: string };

    // the effects committed, and every span of the chain ended
    await eventually(async () => (await countRows(s.sdb.audit.client, 'audit_log', 'account_id = ?', [accountId])) === 1, { what: 'audit applied' });
    const spans = await eventually(
      async () => {
        const all = spansOf(INCOMING_TRACE);
        return all.filter((x) => x.kind === SpanKind.CONSUMER).length === 2 ? all : undefined;
      },
      { what: 'two consumer spans exported' },
    );

    const server = spans.filter((x) => x.kind === SpanKind.SERVER);
    expect(server).toHaveLength(1);
    expect(parentOf(server[0]!)).toBe(INCOMING_SPAN);
    expect(server[0]!.spanContext().traceState?.get('vendor')).toBe('abc');

    const producer = spans.filter((x) => x.kind === SpanKind.PRODUCER);
    expect(producer).toHaveLength(1);
    expect(parentOf(producer[0]!)).toBe(server[0]!.spanContext().spanId);
    expect(producer[0]!.spanContext().traceState?.get('vendor')).toBe('abc');

    const consumers = spans.filter((x) => x.kind === SpanKind.CONSUMER);
    for (const c of consumers) {
      expect(parentOf(c)).toBe(producer[0]!.spanContext().spanId);
      expect(c.spanContext().traceState?.get('vendor')).toBe('abc');
    }
    expect(consumers.map((c) => String(c.attributes['messaging.consumer.group.name'])).sort()).toEqual([
      expect.stringMatching(/audit$/),
      expect.stringMatching(/balances$/),
    ]);
  });

  it('POST without a traceparent starts a new trace that still reaches the subscribers', async () => {
    await using s = await startService();
    const res = await s.app.request('/accounts', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ owner: 'fresh' }) });
    expect(res.status).toBe(201);
    const { accountId } = (await res.json()) as { accountId: string };
    await eventually(async () => (await countRows(s.sdb.audit.client, 'audit_log', 'account_id = ?', [accountId])) === 1, { what: 'audit applied' });

    // the trace the command started is the one its outbox row names
    const row = await s.client.execute({ sql: 'SELECT headers FROM outbox WHERE aggregate_id = ?', args: [accountId] });
    const traceId = String((JSON.parse(String(row.rows[0]!.headers)) as { traceparent: string }).traceparent.split('-')[1]);
    expect(traceId).not.toBe(INCOMING_TRACE);
    const chain = await eventually(
      async () => {
        const all = spansOf(traceId);
        return all.filter((x) => x.kind === SpanKind.CONSUMER).length === 2 ? all : undefined;
      },
      { what: 'the chain of the new trace' },
    );
    expect(chain.filter((x) => x.kind === SpanKind.PRODUCER)).toHaveLength(1);
    const server = chain.filter((x) => x.kind === SpanKind.SERVER);
    expect(server).toHaveLength(1);
    expect(server[0]!.parentSpanContext).toBeUndefined();
  });
});
