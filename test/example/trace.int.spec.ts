// One trace from POST /orders to the example subscribers' effects: the api, relay and consumers roles of one service
// over the example's composition, spans recorded by an in-memory exporter registered as the global tracer provider.
import { createClient } from '@libsql/client';
import { SpanKind, trace } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { APP_MIGRATIONS } from '../../src/entry/boot.ts';
import { modules } from '../../src/modules.ts';
import { readCustomerReport } from '../../src/subscribers/reporting/subscriber.ts';
import { createSubscriberDb, type SubscriberDb } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import { orderBody } from '../support/example-orders.ts';
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

const CALLER_TRACE = '0af7651916cd43dd8448eb211c80319c';
const CALLER_SPAN = 'b7ad6b7169203331';
const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;

describe('example tracing - POST /orders to the read model in one trace', () => {
  it('the request, the publish of order.placed.v1 and its processing by reporting and notifications form one trace', async () => {
    const stream = await freshStream(nats().nc, 'EXTRACE');
    // a database for every subscriber of the composition (a clone may have added its own beside the example's)
    const sdb = new Map<string, SubscriberDb>();
    for (const { name } of modules.subscribers) sdb.set(name, await createSubscriberDb({ migrations: APP_MIGRATIONS.subscriber(name) }));
    try {
      await using s = await createTestService(
        { ROLES: 'api,relay,consumers', NATS_URL: nats().url, ...streamEnv(stream) },
        { modules, openSubscriberDb: async (name) => createClient({ url: sdb.get(name)!.url, timeout: 5000 }) },
        { migrations: APP_MIGRATIONS.service },
      );
      const res = await s.app.request('/orders', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01`, tracestate: 'shop=web' },
        body: JSON.stringify(orderBody({ customerId: 'traced-customer' })),
      });
      expect(res.status).toBe(201);

      // the effect: the reporting read model counts the order
      await eventually(async () => (await readCustomerReport(sdb.get('reporting')!.db, 'traced-customer')).ordersPlaced === 1, {
        what: 'the order in the read model',
      });
      const groupOf = (x: ReadableSpan) => String(x.attributes['messaging.consumer.group.name']);
      const spans = await eventually(
        () => {
          const mine = exporter.getFinishedSpans().filter((x) => x.spanContext().traceId === CALLER_TRACE);
          const applied = mine.filter((x) => x.kind === SpanKind.CONSUMER && /(reporting|notifications)$/.test(groupOf(x)));
          return applied.length === 2 ? mine : undefined;
        },
        { what: 'both subscribers’ spans' },
      );

      const [server, ...moreServers] = spans.filter((x) => x.kind === SpanKind.SERVER);
      expect(moreServers).toEqual([]);
      expect(server!.name).toBe('POST /orders');
      expect(parentOf(server!)).toBe(CALLER_SPAN);

      const [publish, ...morePublishes] = spans.filter((x) => x.kind === SpanKind.PRODUCER);
      expect(morePublishes).toEqual([]);
      expect(publish!.name).toBe('publish order.placed.v1');
      expect(parentOf(publish!)).toBe(server!.spanContext().spanId);

      // every subscriber's span is the publish span's child; the example's two applied the event
      for (const c of spans.filter((x) => x.kind === SpanKind.CONSUMER)) {
        expect(c.name).toBe('process order.placed.v1');
        expect(parentOf(c)).toBe(publish!.spanContext().spanId);
        expect(c.spanContext().traceState?.get('shop')).toBe('web');
      }
      const example = spans.filter((x) => x.kind === SpanKind.CONSUMER && /(reporting|notifications)$/.test(groupOf(x)));
      expect(example.map(groupOf).sort()).toEqual([expect.stringMatching(/notifications$/), expect.stringMatching(/reporting$/)]);
      for (const c of example) expect(c.attributes['inbox.outcome']).toBe('applied');
    } finally {
      for (const db of sdb.values()) db.close();
    }
  });
});
