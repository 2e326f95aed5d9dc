// The fixture service as a Node process (test/support/fixture/entry.ts, booted like src/entry/node.ts): its access
// log on stdout names the server span whose trace context the outbox row stores, and /metrics names the build.
import { createClient } from '@libsql/client';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createTempDir } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { postJson } from '../support/http.ts';
import { FIXTURE_ENTRY, overHttp, ROOT, spawnService, waitForHttp } from '../support/process.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();
const CALLER_TRACE = '0af7651916cd43dd8448eb211c80319c';
const CALLER_SPAN = 'b7ad6b7169203331';

describe('http telemetry - a service process', () => {
  it('the access log line of a command names the server span its outbox row carries; probes stay below info; /metrics names the build', async () => {
    using tmp = createTempDir();
    const url = `file:${join(tmp.dir, 'app.db')}`;
    await using api = await spawnService('node', FIXTURE_ENTRY, { ROLES: 'api', DATABASE_URL: url, NATS_URL: nats().url, LOG_LEVEL: 'info' });
    await waitForHttp(`${api.url}/health`, { child: api });

    const res = await postJson(
      overHttp(api.url),
      '/accounts',
      { owner: 'ann' },
      { traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01`, 'X-Request-Id': 'e2e-1' },
    );
    expect(res.status, api.output()).toBe(201);
    expect(res.headers.get('x-request-id')).toBe('e2e-1');

    const client = createClient({ url });
    const { rows } = await client.execute('SELECT headers FROM outbox');
    client.close();
    const stored = JSON.parse(String(rows[0]!.headers)) as { traceparent: string; correlationId: string };
    const [, traceId, spanId] = stored.traceparent.split('-');
    expect(traceId).toBe(CALLER_TRACE);
    expect(spanId).not.toBe(CALLER_SPAN);
    expect(stored.correlationId).toBe('e2e-1');

    const lines = () =>
      api
        .stdout()
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>);
    const access = await eventually(() => lines().find((l) => l.msg === 'request' && l.path === '/accounts'), { what: 'the access log line' });
    expect(access).toMatchObject({ level: 'info', method: 'POST', route: '/accounts', status: 201, request_id: 'e2e-1', trace_id: traceId, span_id: spanId });

    const metrics = await (await fetch(`${api.url}/metrics`)).text();
    const version = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
    expect(metrics).toContain(`hono_outbox_build_info{runtime="node",service="hono-outbox",version="${version}"} 1`);
    expect(metrics).toMatch(/^http_request_duration_seconds_count\{method="POST",route="\/accounts",status_class="2xx"\} 1$/m);
    // the health checks and the scrape were logged at debug, below LOG_LEVEL=info
    expect(lines().filter((l) => l.msg === 'request' && ['/health', '/metrics'].includes(String(l.path)))).toEqual([]);

    const ready = await fetch(`${api.url}/ready`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({ status: 'ready', roles: ['api'], database: 'ok' });
    await api.stop('SIGTERM');
  });
});
