// The relay's PRODUCER spans, recorded by an in-memory exporter through a tracer handed to the relay (no global
// provider), and the trace context the published messages carry.
import { SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterAll, describe, expect, it } from 'vitest';
import { createCommand } from '../../src/http/command-route.ts';
import { createLogger } from '../../src/logger.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import type { OutboxHeaders } from '../../src/outbox/append-to-outbox.ts';
import { createOutboxMetrics } from '../../src/outbox/outbox-metrics.ts';
import { TRACEPARENT } from '../../src/telemetry/trace-context.ts';
import { accountCommands, expectResponse } from '../support/accounts.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { openAccount } from '../support/fixture/accounts/commands.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { ownStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';
import { partitionOf } from '../../src/outbox/partition.ts';

const nats = useNats();
const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const tracer = provider.getTracer('relay-telemetry-test');
afterAll(() => provider.shutdown());

const TRACE = '0af7651916cd43dd8448eb211c80319c';
const PARENT = 'b7ad6b7169203331';

/** Opens an account whose outbox row stores `headers`; returns the account id and the row's id. */
async function openWith(t: TestDb, headers: OutboxHeaders): Promise<{ accountId: string; rowId: string }> {
  const outcome = await t.deps.writer.write((tx) => openAccount(tx, { owner: 'traced' }, createCommand(tx, t.deps, { headers })));
  const accountId = String((expectResponse(outcome).body as { accountId: string }).accountId);
  return { accountId, rowId: await rowIdOf(t, accountId) };
}

async function rowIdOf(t: TestDb, accountId: string): Promise<string> {
  return String((await t.client.execute({ sql: 'SELECT id FROM outbox WHERE aggregate_id = ?', args: [accountId] })).rows[0]!.id);
}

/** The finished spans of the publishes of row `id` (each test's rows are its own). */
const spansOf = (id: string): ReadableSpan[] => exporter.getFinishedSpans().filter((s) => s.attributes['messaging.message.id'] === id);

/** A logger keeping each JSON line it is given. */
function capturingLog() {
  const lines: Array<Record<string, unknown>> = [];
  return { lines, log: createLogger('debug', (l) => lines.push(JSON.parse(l) as Record<string, unknown>)) };
}

/** Inserts an outbox row of a type the registry does not know, storing `headers`. */
async function insertUnregistered(t: TestDb, id: string, headers: OutboxHeaders): Promise<void> {
  const payload = {
    eventId: id,
    type: 'account.frozen.v1',
    aggregateType: 'account',
    aggregateId: id,
    aggregateVersion: 1,
    occurredAt: '2026-01-01T00:00:00.000Z',
    data: {},
  };
  await t.client.execute({
    sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, headers, status, occurred_at, available_at)
          VALUES (?, 'account', ?, 'account.frozen.v1', ?, ?, 'pending', 0, 0)`,
    args: [id, id, JSON.stringify(payload), JSON.stringify(headers)],
  });
}

describe('relay - producer spans', () => {
  it('a row stored with a traceparent is published under one PRODUCER span, a child of that span in its trace, and the message names it and keeps the tracestate', async () => {
    await using t = await createTestDb();
    const stream = ownStream('TEL');
    const { accountId, rowId } = await openWith(t, { traceparent: `00-${TRACE}-${PARENT}-01`, tracestate: 'vendor=x', correlationId: 'corr-1' });
    expect(await drainOutbox(relayDeps(t, nats().url, { stream, tracer }))).toMatchObject({ published: 1 });

    const spans = spansOf(rowId);
    expect(spans).toHaveLength(1);
    const span = spans[0]!;
    const subject = `${stream.prefix}.account.${accountId}.${partitionOf('account', accountId, 16)}`;
    expect(span.name).toBe('publish account.opened.v1');
    expect(span.attributes['messaging.destination.name']).toBe(subject);
    expect(span.kind).toBe(SpanKind.PRODUCER);
    expect(span.ended).toBe(true);
    expect(span.spanContext().traceId).toBe(TRACE);
    expect(span.parentSpanContext?.spanId).toBe(PARENT);
    expect(span.status.code).not.toBe(SpanStatusCode.ERROR);
    expect(span.attributes).toMatchObject({
      'messaging.system': 'nats',
      'messaging.destination.name': subject,
      'messaging.message.id': rowId,
      'outbox.attempt': 1,
      'outbox.duplicate': false,
    });

    const [msg] = await readStream(nats().nc, stream);
    expect(msg!.headers).toMatchObject({ traceparent: `00-${TRACE}-${span.spanContext().spanId}-01`, tracestate: 'vendor=x', 'Correlation-Id': 'corr-1' });
  });

  it('a row stored without trace headers gets a PRODUCER span that starts a new trace, and the message carries a traceparent naming that span', async () => {
    await using t = await createTestDb();
    const stream = ownStream('TEL');
    const accountId = await accountCommands(t.deps).open();
    const rowId = await rowIdOf(t, accountId);
    await drainOutbox(relayDeps(t, nats().url, { stream, tracer }));

    const [span] = spansOf(rowId);
    expect(span?.kind).toBe(SpanKind.PRODUCER);
    expect(span!.parentSpanContext).toBeUndefined();
    const [msg] = await readStream(nats().nc, stream);
    expect(msg!.headers.traceparent).toMatch(TRACEPARENT);
    expect(msg!.headers.traceparent).toBe(`00-${span!.spanContext().traceId}-${span!.spanContext().spanId}-01`);
    expect(msg!.headers.tracestate).toBeUndefined();
  });

  it('with no tracing SDK the message still continues the stored trace under a span id of its own', async () => {
    await using t = await createTestDb();
    const stream = ownStream('TEL');
    await openWith(t, { traceparent: `00-${TRACE}-${PARENT}-01`, tracestate: 'vendor=x' });
    await drainOutbox(relayDeps(t, nats().url, { stream, tracer: trace.getTracer('no-sdk') }));

    const [msg] = await readStream(nats().nc, stream);
    const [, , traceId, spanId] = TRACEPARENT.exec(msg!.headers.traceparent!)!;
    expect(traceId).toBe(TRACE);
    expect(spanId).not.toBe(PARENT);
    expect(msg!.headers.tracestate).toBe('vendor=x');
  });

  it('a publish the stream refuses ends its span with ERROR and the exception, counts publish_failed, and the parked row is logged with the span ids', async () => {
    await using t = await createTestDb();
    // the relay's own size check passes (256 KiB); the stream refuses anything above 128 bytes
    const stream = ownStream('TEL', { maxMsgSize: 128 });
    const metrics = createOutboxMetrics(createMetrics());
    const { lines, log } = capturingLog();
    const { rowId } = await openWith(t, { traceparent: `00-${TRACE}-${PARENT}-01` });
    const summary = await drainOutbox(relayDeps(t, nats().url, { stream, tracer, metrics, log, settings: { maxAttempts: 1 } }));
    expect(summary).toMatchObject({ published: 0, failed: 1, parked: 1 });

    const [span] = spansOf(rowId);
    expect(span?.status.code).toBe(SpanStatusCode.ERROR);
    expect(span!.events.map((e) => e.name)).toContain('exception');
    expect(span!.parentSpanContext?.spanId).toBe(PARENT);
    expect(metrics.publishErrors.get('publish_failed')).toBe(1);
    expect(metrics.publishErrors.get('broker_unavailable')).toBe(0);
    expect(metrics.parked.get()).toBe(1);

    const ids = { trace_id: TRACE, span_id: span!.spanContext().spanId };
    expect(lines.find((l) => String(l.msg).startsWith('relay: a row could not be published'))).toMatchObject({ ...ids, id: rowId, reason: 'publish_failed' });
    expect(lines.find((l) => String(l.msg).startsWith('relay: row parked as failed'))).toMatchObject({ ...ids, id: rowId });
  });

  it('a row that cannot become a message (an unregistered type) also gets an ERROR span in its trace and counts invalid_event', async () => {
    await using t = await createTestDb();
    const stream = ownStream('TEL');
    const metrics = createOutboxMetrics(createMetrics());
    const { lines, log } = capturingLog();
    const id = `poison-${crypto.randomUUID()}`;
    await insertUnregistered(t, id, { traceparent: `00-${TRACE}-${PARENT}-01` });
    const summary = await drainOutbox(relayDeps(t, nats().url, { stream, tracer, metrics, log, settings: { maxAttempts: 1 } }));
    expect(summary).toMatchObject({ failed: 1, parked: 1 });

    const [span] = spansOf(id);
    expect(span?.kind).toBe(SpanKind.PRODUCER);
    expect(span!.status.code).toBe(SpanStatusCode.ERROR);
    expect(span!.spanContext().traceId).toBe(TRACE);
    expect(metrics.publishErrors.get('invalid_event')).toBe(1);
    expect(lines.find((l) => String(l.msg).startsWith('relay: row parked as failed'))).toMatchObject({
      trace_id: TRACE,
      span_id: span!.spanContext().spanId,
      id,
    });
    expect(await readStream(nats().nc, stream).catch(() => [])).toHaveLength(0);
  });
});
