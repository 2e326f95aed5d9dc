import { existsSync } from 'node:fs';
// Every request's id, SERVER span, access log line and duration metric, in process over a real database, with spans
// recorded by an in-memory exporter (a tracer of its own, no global provider).
import { spawnSync } from 'node:child_process';
import { context, SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider, InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createApp } from '../../src/app.ts';
import { commandRoute, ok } from '../../src/http/command-route.ts';
import { createLogger } from '../../src/logger.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { createTestDb } from '../support/db.ts';
import { fixtureModules } from '../support/fixture/modules.ts';
import { postJson } from '../support/http.ts';
import { createTestService } from '../support/service.ts';

const CALLER_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER_SPAN = '00f067aa0ba902b7';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

type LogLine = Record<string, unknown> & { msg: string; level: string };

/** The fixture's app over a fresh database, logging every line into `lines`, its spans into `exporter`, measured in `metrics`. */
async function telemetryApp() {
  const t = await createTestDb();
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const lines: LogLine[] = [];
  const log = createLogger('debug', (l) => lines.push(JSON.parse(l) as LogLine), { service: 'test' });
  const metrics = createMetrics();
  const deps = { ...t.deps, log, tracer: provider.getTracer('test') };
  const app = createApp(deps, {
    contexts: fixtureModules.contexts,
    metrics,
    extend: (a) => {
      a.get('/boom', () => {
        throw new Error('boom');
      });
      a.get('/hello/:name', (c) => {
        deps.log.info('greeting', { name: c.req.param('name') });
        return c.text('hi');
      });
      a.post(
        '/notes',
        ...commandRoute(deps, z.object({ text: z.string() }), async (_tx, body, cmd) => {
          cmd.log.info('noted', { text: body.text });
          return ok({});
        }),
      );
    },
  });
  const serverSpans = () => exporter.getFinishedSpans().filter((s) => s.kind === SpanKind.SERVER);
  const close = async () => {
    await provider.shutdown();
    t.close();
  };
  return { ...t, app, lines, metrics, serverSpans, [Symbol.asyncDispose]: close };
}

/** The headers stored with the only outbox row of `t`. */
async function storedHeaders(t: { client: { execute(sql: string): Promise<{ rows: Array<Record<string, unknown>> }> } }) {
  const { rows } = await t.client.execute('SELECT headers FROM outbox');
  expect(rows).toHaveLength(1);
  return JSON.parse(String(rows[0]!.headers)) as { traceparent?: string; tracestate?: string; correlationId?: string };
}

const only = <T>(items: T[]): T => {
  expect(items).toHaveLength(1);
  return items[0]!;
};
const accessLines = (lines: LogLine[], path: string) => lines.filter((l) => l.msg === 'request' && l.path === path);
const idsOf = (s: ReadableSpan) => ({ trace_id: s.spanContext().traceId, span_id: s.spanContext().spanId });

describe('http telemetry - request ids', () => {
  it('a request without X-Request-Id gets a generated one in the response', async () => {
    await using t = await telemetryApp();
    const res = await t.app.request('/health');
    expect(res.headers.get('x-request-id')).toMatch(UUID);
  });

  it('a valid incoming X-Request-Id is echoed, an invalid one replaced', async () => {
    await using t = await telemetryApp();
    expect((await t.app.request('/health', { headers: { 'X-Request-Id': 'req-42_abc' } })).headers.get('x-request-id')).toBe('req-42_abc');
    const replaced = (await t.app.request('/health', { headers: { 'X-Request-Id': 'not valid!' } })).headers.get('x-request-id');
    expect(replaced).toMatch(UUID);
  });

  it('errors and 404s carry the request id too', async () => {
    await using t = await telemetryApp();
    expect((await t.app.request('/boom', { headers: { 'X-Request-Id': 'r-500' } })).headers.get('x-request-id')).toBe('r-500');
    expect((await t.app.request('/nowhere', { headers: { 'X-Request-Id': 'r-404' } })).headers.get('x-request-id')).toBe('r-404');
  });

  it("a command's events carry X-Correlation-Id when valid, else the request id", async () => {
    await using withCorrelation = await telemetryApp();
    await postJson(withCorrelation.app, '/accounts', { owner: 'ann' }, { 'X-Correlation-Id': 'corr-7', 'X-Request-Id': 'req-7' });
    expect((await storedHeaders(withCorrelation)).correlationId).toBe('corr-7');

    await using withoutCorrelation = await telemetryApp();
    const res = await postJson(withoutCorrelation.app, '/accounts', { owner: 'bob' });
    expect(res.status).toBe(201);
    expect((await storedHeaders(withoutCorrelation)).correlationId).toBe(res.headers.get('x-request-id'));
  });
});

describe('http telemetry - the server span and the trace stored with outbox rows', () => {
  it("a POST with traceparent and tracestate stores the server span's trace context: same trace, parent = the caller's span, tracestate kept", async () => {
    await using t = await telemetryApp();
    const res = await postJson(t.app, '/accounts', { owner: 'ann' }, { traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01`, tracestate: 'vendor=abc' });
    expect(res.status).toBe(201);
    const server = only(t.serverSpans());
    expect(server.spanContext().traceId).toBe(CALLER_TRACE);
    expect(server.parentSpanContext?.spanId).toBe(CALLER_SPAN);
    const stored = await storedHeaders(t);
    expect(stored.traceparent).toBe(`00-${CALLER_TRACE}-${server.spanContext().spanId}-01`);
    expect(stored.tracestate).toBe('vendor=abc');
  });

  it('a POST without traceparent starts a new trace, the one stored with its outbox row', async () => {
    await using t = await telemetryApp();
    expect((await postJson(t.app, '/accounts', { owner: 'ann' })).status).toBe(201);
    const server = only(t.serverSpans());
    expect(server.parentSpanContext).toBeUndefined();
    const stored = await storedHeaders(t);
    expect(stored.traceparent).toBe(`00-${server.spanContext().traceId}-${server.spanContext().spanId}-01`);
    expect(server.spanContext().traceId).not.toBe(CALLER_TRACE);
    expect(stored.tracestate).toBeUndefined();
  });

  it('the SERVER span is named by method and route pattern, with the HTTP attributes and status', async () => {
    await using t = await telemetryApp();
    const opened = await postJson(t.app, '/accounts', { owner: 'ann' });
    const { accountId } = (await opened.json()) as { accountId: string };
    expect((await t.app.request(`/accounts/${accountId}`)).status).toBe(200);
    const read = t.serverSpans().find((s) => s.name === 'GET /accounts/:id');
    expect(read).toBeDefined();
    expect(read!.attributes).toMatchObject({
      'http.request.method': 'GET',
      'http.route': '/accounts/:id',
      'url.path': `/accounts/${accountId}`,
      'http.response.status_code': 200,
    });
    expect(read!.status.code).toBe(SpanStatusCode.UNSET);
    expect(t.serverSpans().find((s) => s.name === 'POST /accounts')?.attributes['http.response.status_code']).toBe(201);
  });

  it('a 5xx ends the SERVER span with ERROR; a 4xx does not', async () => {
    await using t = await telemetryApp();
    expect((await t.app.request('/boom')).status).toBe(500);
    expect((await t.app.request('/accounts/nobody')).status).toBe(404);
    const boom = only(t.serverSpans().filter((s) => s.name === 'GET /boom'));
    expect(boom.status.code).toBe(SpanStatusCode.ERROR);
    expect(boom.attributes).toMatchObject({ 'http.response.status_code': 500, 'http.route': '/boom', 'error.type': '500' });
    const missing = only(t.serverSpans().filter((s) => s.name === 'GET /accounts/:id'));
    expect(missing.status.code).toBe(SpanStatusCode.UNSET);
    expect(missing.attributes['http.response.status_code']).toBe(404);
  });

  it('a request no route matches gets a span named by its method alone, without http.route', async () => {
    await using t = await telemetryApp();
    expect((await t.app.request('/nowhere/at/all')).status).toBe(404);
    const span = only(t.serverSpans());
    expect(span.name).toBe('GET');
    expect(span.attributes['http.route']).toBeUndefined();
  });
});

describe('http telemetry - the access log', () => {
  it('one request line per request, naming the route, the request id and the server span', async () => {
    await using t = await telemetryApp();
    const res = await postJson(t.app, '/accounts', { owner: 'ann' });
    const line = only(accessLines(t.lines, '/accounts'));
    expect(line).toMatchObject({
      level: 'info',
      method: 'POST',
      route: '/accounts',
      status: 201,
      request_id: res.headers.get('x-request-id'),
      ...idsOf(only(t.serverSpans())),
    });
    expect(typeof line.duration_ms).toBe('number');
  });

  it('a request no route matches is logged with route unmatched', async () => {
    await using t = await telemetryApp();
    await t.app.request('/nowhere');
    expect(only(accessLines(t.lines, '/nowhere'))).toMatchObject({ route: 'unmatched', status: 404 });
  });

  it('probes are logged at debug, other requests at info', async () => {
    await using t = await telemetryApp();
    for (const path of ['/health', '/ready', '/metrics']) {
      await t.app.request(path);
      expect(only(accessLines(t.lines, path)).level).toBe('debug');
    }
    await t.app.request('/outbox/stats');
    expect(only(accessLines(t.lines, '/outbox/stats')).level).toBe('info');
  });

  it('an unhandled error is logged with its type, message and stack, and the trace ids of its server span', async () => {
    await using t = await telemetryApp();
    const res = await t.app.request('/boom');
    expect(res.status).toBe(500);
    const error = only(t.lines.filter((l) => l.msg === 'unhandled error'));
    const ids = idsOf(only(t.serverSpans()));
    expect(error).toMatchObject({ level: 'error', path: '/boom', request_id: res.headers.get('x-request-id'), ...ids });
    expect(error.error).toMatchObject({ type: 'Error', message: 'boom', stack: expect.stringContaining('boom') });
    expect(only(accessLines(t.lines, '/boom'))).toMatchObject({ status: 500, ...ids });
  });

  it("without a context manager, a command's cmd.log lines carry its server span's trace_id and span_id", async () => {
    await using t = await telemetryApp();
    const res = await t.app.request('/notes', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01` },
      body: JSON.stringify({ text: 'hello' }),
    });
    expect(res.status).toBe(200);
    const noted = only(t.lines.filter((l) => l.msg === 'noted'));
    expect(noted).toMatchObject({ text: 'hello', ...idsOf(only(t.serverSpans())) });
  });

  describe('with a context manager, as the entries register with TRACE_CONTEXT=async-local-storage', () => {
    const manager = new AsyncLocalStorageContextManager();
    beforeAll(() => {
      context.setGlobalContextManager(manager.enable());
    });
    afterAll(() => {
      context.disable();
    });

    it("a line a handler logs while handling the request carries its server span's trace_id and span_id", async () => {
      await using t = await telemetryApp();
      await t.app.request('/hello/ann');
      const greeting = only(t.lines.filter((l) => l.msg === 'greeting'));
      expect(greeting).toMatchObject({ name: 'ann', ...idsOf(only(t.serverSpans())) });
    });
  });
});

describe('http telemetry - metrics', () => {
  it('http_request_duration_seconds is labelled by method, route pattern and status class; hono_outbox_build_info names the build', async () => {
    // the api role alone, with no broker: nothing to connect to
    await using s = await createTestService({ ROLES: 'api' }, { connect: undefined, version: '1.2.3', runtime: 'bun' });
    const opened = await postJson(s.app, '/accounts', { owner: 'ann' });
    const { accountId } = (await opened.json()) as { accountId: string };
    await s.app.request(`/accounts/${accountId}`);
    await s.app.request('/accounts/nobody');
    await s.app.request(`/nowhere/${accountId}`);
    const text = await (await s.app.request('/metrics')).text();

    const count = (labels: string) => text.match(new RegExp(`^http_request_duration_seconds_count\\{${labels}\\} (\\d+)$`, 'm'))?.[1];
    expect(count('method="POST",route="/accounts",status_class="2xx"')).toBe('1');
    expect(count('method="GET",route="/accounts/:id",status_class="2xx"')).toBe('1');
    expect(count('method="GET",route="/accounts/:id",status_class="4xx"')).toBe('1');
    expect(count('method="GET",route="unmatched",status_class="4xx"')).toBe('1');
    expect(text).not.toContain(accountId);
    expect(text).toMatch(/^hono_outbox_build_info\{runtime="bun",service="hono-outbox",version="1.2.3"\} 1$/m);

    // both families pass promtool's checks (skipped only on a machine without promtool and without CI set: .ci/run
    // installs it)
    if (!existsSync('/usr/bin/promtool') && !process.env.CI) return;
    const families = text
      .split('\n')
      .filter((l) => /^(# (HELP|TYPE) )?(http_request_duration_seconds|hono_outbox_build_info)\b/.test(l))
      .join('\n');
    const promtool = spawnSync('/usr/bin/promtool', ['check', 'metrics'], { input: `${families}\n`, encoding: 'utf8' });
    expect(promtool.status, promtool.stdout + promtool.stderr).toBe(0);
  });
});
