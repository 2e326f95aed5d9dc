// A Deno user's quick start (README): with a `deno` on PATH, `deno task check`, `deno task test` and `deno task
// dev` work after `npm install`, whose postinstall removes node_modules/.bin/deno (npm's copy, which `deno task`
// would otherwise run as a script in place of the user's). npm's binary stands in for the user's, reached only
// through PATH.
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createTempDir } from '../support/db.ts';
import { useNats } from '../support/use-nats.ts';
import { freePort, ROOT, waitForHttp } from '../support/process.ts';
import { runGroupToExit, spawnGroup } from '../support/process-group.ts';

const nats = useNats();

/** A directory holding only `deno` (a link to npm's binary), put first on PATH as a user's install would be. */
const bin = mkdtempSync(join(tmpdir(), 'deno-path-'));
symlinkSync(join(ROOT, 'node_modules/deno/deno'), join(bin, 'deno'));
const PATH = `${bin}:${process.env.PATH ?? ''}`;
afterAll(() => rmSync(bin, { recursive: true, force: true }));

describe('deno tasks - the quick start with the deno on PATH', () => {
  it('deno task check type-checks the Deno entries and the Deno test', async () => {
    const result = await runGroupToExit('deno', ['task', 'check'], { PATH }, { timeoutMs: 120_000 });
    expect(result.code, result.output).toBe(0);
    expect(result.output).toContain('src/entry/deno.ts');
    expect(result.output).toContain('test/deno/app.test.ts');
  });

  it('deno task test runs the Deno smoke test and it passes', async () => {
    const result = await runGroupToExit('deno', ['task', 'test'], { PATH }, { timeoutMs: 120_000 });
    expect(result.code, result.output).toBe(0);
    expect(result.output).toMatch(/ok \| 1 passed \| 0 failed/);
  });

  it('deno task dev serves /health with every role, then exits 0 on SIGTERM', async () => {
    using tmp = createTempDir();
    const port = await freePort();
    const service = spawnGroup('deno', ['task', 'dev'], {
      PATH,
      HOST: '127.0.0.1',
      PORT: String(port),
      DATABASE_URL: `file:${join(tmp.dir, 'app.db')}`,
      CONSUMER_DATABASE_URL_TEMPLATE: `file:${join(tmp.dir, '{name}.db')}`,
      NATS_URL: nats().url,
      SERVICE_NAME: 'deno-tasks',
      LOG_LEVEL: 'warn',
    });
    try {
      const health = await waitForHttp(`http://127.0.0.1:${port}/health`, { child: service, timeoutMs: 30_000 });
      expect(health.status, service.output()).toBe(200);
      await health.body?.cancel();
      expect(await service.stop('SIGTERM'), service.output()).toEqual({ code: 0, signal: null });
    } finally {
      await service.kill9();
    }
  });
});
