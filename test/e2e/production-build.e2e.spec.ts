// The production build as the Dockerfile's runtime stage runs it: `npm run build`, then dist/, db/ and the package
// files in a fresh directory, `npm ci --omit=dev` and the image's CMD, both read from the Dockerfile itself.
import { createClient } from '@libsql/client';
import { cpSync, existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createTempDir } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { orderBody } from '../support/example-orders.ts';
import { postJson } from '../support/http.ts';
import { natsClient, startNats } from '../support/nats.ts';
import { freePort, overHttp, ROOT, waitForHttp, withOutput } from '../support/process.ts';
import { runGroupToExit, spawnGroup } from '../support/process-group.ts';
import { readStream } from '../support/stream.ts';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

/** The runtime stage of the Dockerfile: its `RUN npm ci …` line, CMD and HEALTHCHECK, so the test runs what the image runs. */
function runtimeStage(): { install: string; cmd: string[]; healthcheck: string[] } {
  const text = readFileSync(join(ROOT, 'Dockerfile'), 'utf8').replace(/\\\n\s*/g, ' ');
  const stages = text.split(/^FROM /m);
  const last = stages[stages.length - 1]!;
  const install = /^RUN (npm ci [^&\n]*?)(?:\s*&&.*)?$/m.exec(last)?.[1];
  const cmd = /^CMD (\[.*\])\s*$/m.exec(last)?.[1];
  const healthcheck = /^HEALTHCHECK .*?CMD (\[.*\])\s*$/m.exec(last)?.[1];
  if (!install || !cmd || !healthcheck) throw new Error('the Dockerfile runtime stage lacks `RUN npm ci`, an exec-form CMD or an exec-form HEALTHCHECK');
  return { install: install.trim(), cmd: JSON.parse(cmd) as string[], healthcheck: JSON.parse(healthcheck) as string[] };
}

/** Runs the image's HEALTHCHECK command (exec form, `node …`) in `cwd` and returns its exit code. */
async function healthcheck(cwd: string, command: string[], env: Record<string, string>): Promise<number | null> {
  const [cmd, ...args] = command;
  expect(cmd).toBe('node');
  return (await runGroupToExit(process.execPath, args, env, { cwd, timeoutMs: 30_000 })).code;
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => relative(dir, join(e.parentPath, e.name)));
}

describe('production build - dist/ with production dependencies, started as the image starts it', () => {
  it('builds all of src, installs without dev dependencies, passes the image HEALTHCHECK, takes an order, publishes it and applies it in the read model', async () => {
    const build = await runGroupToExit('npm', ['run', 'build'], {}, { timeoutMs: 120_000 });
    expect(build.code, build.output).toBe(0);
    // every module of src/ (all entries: node, relay, consume, cli, migrate, …) compiled, and nothing else
    const sources = filesUnder(join(ROOT, 'src'))
      .filter((f) => f.endsWith('.ts'))
      .map((f) => f.replace(/\.ts$/, '.js'));
    const emitted = filesUnder(join(ROOT, 'dist')).filter((f) => f.endsWith('.js'));
    expect(sources).toContain(join('entry', 'node.js'));
    expect(emitted.sort()).toEqual(sources.sort());
    expect(filesUnder(join(ROOT, 'dist')).filter((f) => f.endsWith('.ts'))).toEqual([]);
    // no fault injection ships: nothing reads the test variable, builds crash hooks or kills its own process
    for (const file of filesUnder(join(ROOT, 'dist'))) {
      const text = readFileSync(join(ROOT, 'dist', file), 'utf8');
      for (const needle of ['HONO_OUTBOX_TEST_FAULT', 'FaultsFromEnv', 'test-faults', 'fault-entry', 'process.kill(']) {
        expect(text.includes(needle), `dist/${file} contains ${needle}`).toBe(false);
      }
    }

    // the image's /app: exactly what the Dockerfile copies into the runtime stage
    const app = createTempDir('hono-outbox-image-');
    cleanups.push(() => app[Symbol.dispose]());
    for (const part of ['dist', 'db', 'package.json', 'package-lock.json']) cpSync(join(ROOT, part), join(app.dir, part), { recursive: true });

    const stage = runtimeStage();
    const install = await runGroupToExit(
      'sh',
      ['-c', stage.install],
      { NODE_ENV: 'production', npm_config_prefer_offline: 'true' },
      { cwd: app.dir, timeoutMs: 120_000 },
    );
    expect(install.code, install.output).toBe(0);
    for (const dev of ['typescript', 'tsx', 'vitest', 'wrangler', 'drizzle-kit']) {
      expect(existsSync(join(app.dir, 'node_modules', dev)), `dev dependency ${dev} installed`).toBe(false);
    }
    expect(existsSync(join(app.dir, 'node_modules/@libsql/client'))).toBe(true);

    const nats = await startNats();
    cleanups.push(() => nats[Symbol.asyncDispose]());
    const port = await freePort();
    const dbPath = join(app.dir, 'data', 'app.db');
    const env = {
      NODE_ENV: 'production',
      HOST: '127.0.0.1',
      PORT: String(port),
      DATABASE_URL: `file:${dbPath}`,
      CONSUMER_DATABASE_URL_TEMPLATE: `file:${join(app.dir, 'data', '{name}.db')}`,
      NATS_URL: nats.url,
      LOG_LEVEL: 'warn',
      // inert in production: a relay that obeyed it would SIGKILL itself after the first PubAck, subscribers would skip the inbox
      HONO_OUTBOX_TEST_FAULT: 'kill-after-puback:1,no-inbox',
    };
    const [cmd, ...args] = stage.cmd;
    expect(cmd).toBe('node');
    const service = spawnGroup(process.execPath, args, env, { cwd: app.dir });
    cleanups.push(async () => void (await service.kill9()));
    const url = `http://127.0.0.1:${port}`;

    const health = await waitForHttp(`${url}/health`, { child: service, timeoutMs: 30_000 });
    expect(health.status, service.output()).toBe(200);
    expect(await health.json()).toEqual({ status: 'ok' });
    expect(await healthcheck(app.dir, stage.healthcheck, env)).toBe(0);

    const placed = await postJson(overHttp(url), '/orders', orderBody());
    expect(placed.status, service.output()).toBe(201);
    const { orderId } = (await placed.json()) as { orderId: string };

    const metrics = await fetch(`${url}/metrics`);
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toContain('outbox_published_total');
    const published = async () => /^outbox_published_total 1$/m.test(await (await fetch(`${url}/metrics`)).text());
    await withOutput(service, eventually(published, { timeoutMs: 20_000, what: 'the order published' }));

    // the event in the stream carries the outbox row's id as Nats-Msg-Id
    const client = createClient({ url: `file:${dbPath}`, timeout: 5000 });
    cleanups.push(() => client.close());
    const row = (await client.execute('SELECT id, status FROM outbox WHERE aggregate_id = ?', [orderId])).rows[0]!;
    expect(row.status).toBe('sent');
    const nc = await natsClient(nats.url);
    cleanups.push(() => nc.close());
    const stream = await readStream(nc, 'HONO_OUTBOX');
    expect(stream.map((m) => m.headers['Nats-Msg-Id'])).toEqual([String(row.id)]);

    // the default ROLES run the subscribers too: their migrations (db/subscribers/<name>) are found from dist/
    const report = async () => (await (await fetch(`${url}/reports/customers/${orderBody().customerId}`)).json()) as { ordersPlaced?: number };
    await withOutput(
      service,
      eventually(async () => (await report()).ordersPlaced === 1, { timeoutMs: 20_000, what: 'the order in the report' }),
    );

    // the operational CLI runs from dist/ as well
    const stats = await runGroupToExit(process.execPath, ['dist/entry/cli.js', 'outbox:stats'], env, { cwd: app.dir, timeoutMs: 30_000 });
    expect(stats.code, stats.output).toBe(0);
    expect(JSON.parse(stats.output.slice(stats.output.indexOf('{')))).toMatchObject({ pending: 0, failed: 0, sent: 1 });

    expect(await service.stop('SIGTERM'), service.output()).toEqual({ code: 0, signal: null });
    expect(await healthcheck(app.dir, stage.healthcheck, env)).toBe(1);
  }, 300_000); // a type-checked build and an install: ~30 s alone, much more next to other suites on 2 cores
});
