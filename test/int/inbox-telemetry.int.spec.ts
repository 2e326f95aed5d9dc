// The CONSUMER span of each message a subscriber handles, recorded by an in-memory exporter through a tracer given to
// the runner (no global provider): its parent, attributes and outcome, its failures, and the log lines that name it.
import { jetstream } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { context, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider, InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor, type SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterAll, describe, expect, it } from 'vitest';
import type { Tx } from '../../src/db/open-database.ts';
import type { Writer } from '../../src/db/writer.ts';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { defineSubscriber } from '../../src/inbox/subscriber.ts';
import { createLogger } from '../../src/logger.ts';
import { eventSubject, type StreamSettings } from '../../src/nats/stream-settings.ts';
import { partitionOf } from '../../src/outbox/partition.ts';
import { creditedEvent, openedEvent, testSubscriber } from '../support/accounts.ts';
import { createSubscriberDb, type SubscriberDb, testRunner } from '../support/consumer.ts';
import type { FixtureEvents } from '../support/fixture/modules.ts';
import { balances, readOwnerBalance } from '../support/fixture/subscribers/balances/subscriber.ts';
import { freshStream, publishRaw } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

/** What happened, in order: commits of the subscriber's writes and span ends. */
const timeline: string[] = [];
const recordEnds: SpanProcessor = {
  onStart: () => undefined,
  onEnd: (span) => void timeline.push(`ended ${span.attributes['messaging.message.id']}`),
  forceFlush: async () => undefined,
  shutdown: async () => undefined,
};
const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter), recordEnds] });
const tracer = provider.getTracer('inbox-telemetry-test');
afterAll(() => provider.shutdown());

const TRACE = '0af7651916cd43dd8448eb211c80319c';
const PARENT = 'b7ad6b7169203331';

/** The CONSUMER spans of message `eventId`, in the order they ended. */
const spansOf = (eventId: string): ReadableSpan[] =>
  exporter.getFinishedSpans().filter((s) => s.kind === SpanKind.CONSUMER && s.attributes['messaging.message.id'] === eventId);

/** Publishes `event` as the relay does, with the trace headers given. */
async function publishTraced(stream: StreamSettings, event: IntegrationEvent, trace: { traceparent?: string; tracestate?: string }) {
  const h = natsHeaders();
  h.set('Content-Type', 'application/json');
  if (trace.traceparent) h.set('traceparent', trace.traceparent);
  if (trace.tracestate) h.set('tracestate', trace.tracestate);
  const subject = eventSubject(stream.prefix, event.aggregateType, event.aggregateId, partitionOf(event.aggregateType, event.aggregateId, 16));
  await jetstream(nats().nc).publish(subject, new TextEncoder().encode(JSON.stringify(event)), { msgID: event.eventId, headers: h });
  return subject;
}

/** The subscriber database's writer, noting each commit in the timeline. */
function observedWriter(sdb: SubscriberDb): Writer {
  return {
    idle: () => sdb.writer.idle(),
    async write<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
      const value = await sdb.writer.write(fn);
      timeline.push('committed');
      return value;
    },
  };
}

describe('inbox telemetry - consumer spans', () => {
  it('gives a message carrying traceparent and tracestate one CONSUMER span, child of that span in its trace, ended after the effect committed', async () => {
    const stream = await freshStream(nats().nc, 'TEL');
    const event = creditedEvent({ owner: 'traced-owner', amountCents: 25 });
    const subject = await publishTraced(stream, event, { traceparent: `00-${TRACE}-${PARENT}-01`, tracestate: 'vendor=x' });
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    timeline.length = 0;

    const runner = testRunner(sdb, nats().url, balances, stream, { tracer, writer: observedWriter(sdb), durableName: 'svc-balances' });
    expect(await runner.run({ untilIdle: true, timeLimitMs: 20_000 })).toMatchObject({ processed: 1 });

    expect(await readOwnerBalance(sdb.db, 'traced-owner')).toMatchObject({ creditedCents: 25 });
    const [span, ...others] = spansOf(event.eventId);
    expect(others).toEqual([]);
    expect(span!.name).toBe(`process ${event.type}`);
    expect(span!.attributes['messaging.destination.name']).toBe(subject);
    expect(span!.spanContext().traceId).toBe(TRACE);
    expect(span!.parentSpanContext?.spanId).toBe(PARENT);
    expect(span!.spanContext().spanId).not.toBe(PARENT);
    expect(span!.spanContext().traceState?.get('vendor')).toBe('x');
    expect(span!.attributes).toMatchObject({
      'messaging.system': 'nats',
      'messaging.destination.name': subject,
      'messaging.message.id': event.eventId,
      'messaging.consumer.group.name': 'svc-balances',
      'inbox.outcome': 'applied',
    });
    expect(span!.status.code).not.toBe(SpanStatusCode.ERROR);
    expect(timeline.indexOf('committed')).toBeGreaterThanOrEqual(0);
    expect(timeline.indexOf(`ended ${event.eventId}`)).toBeGreaterThan(timeline.indexOf('committed'));
  });

  it('starts a new trace for a message without trace headers', async () => {
    const stream = await freshStream(nats().nc, 'TEL');
    const event = openedEvent({ owner: 'untraced-owner' });
    await publishTraced(stream, event, {});
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });

    await testRunner(sdb, nats().url, balances, stream, { tracer }).run({ untilIdle: true, timeLimitMs: 20_000 });

    const [span, ...others] = spansOf(event.eventId);
    expect(others).toEqual([]);
    expect(span!.parentSpanContext).toBeUndefined();
    expect(span!.spanContext().traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(span!.spanContext().traceId).not.toBe(TRACE);
    expect(span!.attributes).toMatchObject({ 'inbox.outcome': 'applied', 'messaging.consumer.group.name': 'balances' });
  });

  it('marks each span with what the inbox did: a copy is a duplicate, an unhandled type ignored, a body that is not JSON a dead letter', async () => {
    const stream = await freshStream(nats().nc, 'TEL');
    const opened = openedEvent({ owner: 'outcome-owner' });
    const credit = creditedEvent({ owner: 'outcome-owner' });
    await publishRaw(nats().nc, stream, opened, opened.eventId);
    await publishRaw(nats().nc, stream, opened, 'copy-of-opened');
    await publishRaw(nats().nc, stream, credit, credit.eventId);
    await publishRaw(nats().nc, stream, 'not json', 'broken-body-msg');
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    const openingsOnly = defineSubscriber<FixtureEvents>()({ name: 'openings', on: { 'account.opened.v1': (tx, e) => balances.handle(tx, e) } });

    const summary = await testRunner(sdb, nats().url, openingsOnly, stream, { tracer }).run({ untilIdle: true, timeLimitMs: 20_000 });

    expect(summary).toMatchObject({ processed: 1, duplicates: 1, ignored: 1, deadLettered: 1 });
    expect(spansOf(opened.eventId).map((s) => s.attributes['inbox.outcome'])).toEqual(['applied', 'duplicate']);
    expect(spansOf(credit.eventId).map((s) => s.attributes['inbox.outcome'])).toEqual(['ignored']);
    const [dead] = spansOf('broken-body-msg');
    expect(dead!.attributes['inbox.outcome']).toBe('dead_letter');
    expect(dead!.status).toMatchObject({ code: SpanStatusCode.ERROR, message: expect.stringContaining('not JSON') });
  });

  it('records a failing handler on its span (ERROR, the exception) and names that span in the retry and dead-letter log lines', async () => {
    const stream = await freshStream(nats().nc, 'TEL');
    const event = creditedEvent({ owner: 'failing-owner' });
    await publishTraced(stream, event, { traceparent: `00-${TRACE}-${PARENT}-01` });
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger('warn', (l) => lines.push(JSON.parse(l)));
    const failing = testSubscriber('failing', async () => {
      throw new TypeError('the handler broke');
    });

    const summary = await testRunner(sdb, nats().url, failing, stream, { tracer, log, maxDeliver: 2 }).run({ untilIdle: true, timeLimitMs: 20_000 });

    expect(summary).toMatchObject({ retried: 1, deadLettered: 1 });
    const spans = spansOf(event.eventId);
    expect(spans.map((s) => s.attributes['inbox.outcome'])).toEqual(['retry', 'dead_letter']);
    for (const s of spans) {
      expect(s.spanContext().traceId).toBe(TRACE);
      expect(s.status).toMatchObject({ code: SpanStatusCode.ERROR, message: expect.stringContaining('the handler broke') });
      expect(s.events.find((e) => e.name === 'exception')?.attributes).toMatchObject({
        'exception.type': 'TypeError',
        'exception.message': 'the handler broke',
      });
    }
    const about = lines.filter((l) => l.eventId === event.eventId);
    expect(about.map((l) => l.msg)).toEqual([expect.stringContaining('retrying'), 'consumer: message dead-lettered']);
    about.forEach((line, k) => {
      expect(line).toMatchObject({ trace_id: TRACE, span_id: spans[k]!.spanContext().spanId });
    });
  });

  it("without a context manager, the lines a handler writes through ctx.log carry its span's trace_id and span_id", async () => {
    const stream = await freshStream(nats().nc, 'TEL');
    const event = openedEvent({ owner: 'ctx-log-owner' });
    await publishTraced(stream, event, { traceparent: `00-${TRACE}-${PARENT}-01` });
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger('info', (l) => lines.push(JSON.parse(l)));
    const logging = testSubscriber('ctx-logging', async (tx, e, ctx) => {
      await balances.handle(tx, e);
      ctx?.log.info('applied here', { eventId: e.eventId });
    });
    await testRunner(sdb, nats().url, logging, stream, { tracer, log }).run({ untilIdle: true, timeLimitMs: 20_000 });

    const [span] = spansOf(event.eventId);
    expect(lines.find((l) => l.msg === 'applied here')).toMatchObject({ trace_id: TRACE, span_id: span!.spanContext().spanId, eventId: event.eventId });
  });

  it("makes the span active while the handler runs: the handler's log lines and its own spans belong to it", async () => {
    const stream = await freshStream(nats().nc, 'TEL');
    const event = openedEvent({ owner: 'logging-owner' });
    await publishTraced(stream, event, { traceparent: `00-${TRACE}-${PARENT}-01` });
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger('info', (l) => lines.push(JSON.parse(l)));
    const logging = testSubscriber('logging', async (tx, e) => {
      tracer.startSpan('lookup', {}, context.active()).end();
      await balances.handle(tx, e);
      log.info('applying the event', { eventId: e.eventId }); // after an await: the context must survive it
    });
    const manager = new AsyncLocalStorageContextManager().enable();
    context.setGlobalContextManager(manager);
    try {
      await testRunner(sdb, nats().url, logging, stream, { tracer, log }).run({ untilIdle: true, timeLimitMs: 20_000 });
    } finally {
      context.disable();
    }

    const [span] = spansOf(event.eventId);
    const line = lines.find((l) => l.msg === 'applying the event');
    expect(line).toMatchObject({ trace_id: TRACE, span_id: span!.spanContext().spanId, eventId: event.eventId });
    const lookup = exporter.getFinishedSpans().filter((s) => s.name === 'lookup' && s.spanContext().traceId === TRACE);
    expect(lookup.map((s) => s.parentSpanContext?.spanId)).toEqual([span!.spanContext().spanId]);
    expect(trace.getActiveSpan()).toBeUndefined();
  });
});
