// The service with the api role as a real process on a runtime, its own database in a temp dir, for tests of HTTP.
import { join } from 'node:path';
import { expect, type TestContext } from 'vitest';
import { createTempDir } from './db.ts';
import { spawnService, waitForHttp, type Runtime, type ServiceHandle } from './process.ts';

/** Starts `src/entry/<runtime>.ts` with ROLES=api and `env`, answering /health; killed when the test `t` ends. */
export async function startApiProcess(t: TestContext, runtime: Runtime, env: Record<string, string> = {}): Promise<ServiceHandle & { dbUrl: string }> {
  const tmp = createTempDir();
  const dbUrl = `file:${join(tmp.dir, 'app.db')}`;
  const service = await spawnService(runtime, `src/entry/${runtime}.ts`, { DATABASE_URL: dbUrl, ROLES: 'api', LOG_LEVEL: 'warn', ...env });
  // through the test's own context: tests that run at once each clean up after themselves
  t.onTestFinished(async () => {
    await service.kill9();
    tmp[Symbol.dispose]();
  });
  const health = await waitForHttp(`${service.url}/health`, { child: service, timeoutMs: 30_000 });
  expect(health.status, service.output()).toBe(200);
  return { ...service, dbUrl };
}
