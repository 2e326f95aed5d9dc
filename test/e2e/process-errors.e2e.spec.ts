import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createTempDir } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { orderBody } from '../support/example-orders.ts';
import { postJson } from '../support/http.ts';
import { startNats } from '../support/nats.ts';
import { FAULT_ENTRY, overHttp, spawnService, waitForHttp, withOutput } from '../support/process.ts';

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

function workspace() {
  const tmp = createTempDir();
  cleanups.push(() => tmp[Symbol.dispose]());
  return {
    DATABASE_URL: `file:${join(tmp.dir, 'app.db')}`,
    CONSUMER_DATABASE_URL_TEMPLATE: `file:${join(tmp.dir, '{name}.db')}`,
  };
}

type LogLine = {
  level?: string;
  msg?: string;
  service?: string;
  version?: string;
  error?: { type?: string; message?: string; stack?: string };
  reason?: string;
};
const logLines = (stderr: string): LogLine[] =>
  stderr
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as LogLine);

describe('process - errors nobody handled', () => {
  // with LOG_LEVEL=silent the fatal line is written all the same
  it.each([
    ['uncaught exception', 'info', 'injected uncaught exception'],
    ['unhandled rejection', 'silent', 'injected unhandled rejection'],
  ])('an %s is logged as one JSON error line with its stack, then the service stops gracefully and exits 1 (LOG_LEVEL=%s)', async (what, level, message) => {
    // the fixture service (test/support/fixture) with the crash hooks
    const env = { ...workspace(), ROLES: 'api', NATS_URL: 'nats://127.0.0.1:1', LOG_LEVEL: level, HONO_OUTBOX_TEST_FAULT: `${what.replace(' ', '-')}:1500` };
    const api = await spawnService('node', FAULT_ENTRY, env, ['--fixture']);
    cleanups.push(() => api.kill9());
    await waitForHttp(`${api.url}/health`, { child: api });
    expect((await postJson(overHttp(api.url), '/accounts', { owner: 'ann' })).status).toBe(201);

    const exit = await api.exited;
    expect(exit, api.output()).toEqual({ code: 1, signal: null });
    const lines = logLines(api.stdout());
    const fatal = lines.filter((l) => l.level === 'error');
    expect(fatal, api.output()).toHaveLength(1);
    expect(fatal[0]!.msg).toBe(what);
    expect(fatal[0]!.error?.message).toContain(message);
    expect(fatal[0]!.error?.stack).toMatch(/fault-entry\.ts/);
    expect(fatal[0]).toMatchObject({ service: 'hono-outbox', version: expect.stringMatching(/^\d+\.\d+\.\d+/) });
    if (level === 'info')
      expect(
        lines.find((l) => l.msg === 'stopping'),
        api.output(),
      ).toMatchObject({ reason: what });
  });
});

describe('process - fault injection is not in production entries', () => {
  it('the production entry ignores HONO_OUTBOX_TEST_FAULT: with kill-after-puback:1 it publishes, keeps running and stops with 0', async () => {
    const nats = await startNats();
    cleanups.push(() => nats[Symbol.asyncDispose]());
    const service = await spawnService('node', 'src/entry/node.ts', {
      ...workspace(),
      ROLES: 'api,relay',
      NATS_URL: nats.url,
      LOG_LEVEL: 'warn',
      RELAY_POLL_MS: '20',
      HONO_OUTBOX_TEST_FAULT: 'kill-after-puback:1',
    });
    cleanups.push(() => service.kill9());
    await waitForHttp(`${service.url}/health`, { child: service });
    for (let i = 0; i < 3; i++) expect((await postJson(overHttp(service.url), '/orders', orderBody())).status).toBe(201);
    const published = async () => /^outbox_published_total 3$/m.test(await (await fetch(`${service.url}/metrics`)).text());
    await withOutput(service, eventually(published, { timeoutMs: 20_000, what: 'three events published' }));
    expect(service.proc.exitCode).toBeNull();
    expect(await service.stop('SIGTERM'), service.output()).toEqual({ code: 0, signal: null });
  });
});
