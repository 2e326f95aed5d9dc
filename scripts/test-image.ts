// `npm run test:image`: builds the image from the Dockerfile and runs it for real against a private nats-server
// (containers on the host network, talking to 127.0.0.1): the HEALTHCHECK turns healthy, the process runs as uid
// 1000, an order placed over HTTP reaches the read model, the data survives replacing the container on its volume,
// `docker stop` ends it inside the grace period with exit 0, and relay-only and consumers-only containers (with an
// api-only one) pass their healthchecks and carry an order end to end. Exit 0 when every check passed or when no
// Docker daemon runs ("skipped"), 1 on the first failed check. Removes its containers, volume, image tag and temp
// dirs. Not part of `npm test`: the image build alone takes minutes.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { eventually } from '../test/support/eventually.ts';
import { orderBody } from '../test/support/example-orders.ts';
import { startNats, type NatsServer } from '../test/support/nats.ts';
import { freePort, ROOT } from '../test/support/process.ts';
import { logs, mainProcessUid, stopWithin, waitHealthy } from './test-image/container.ts';
import { docker, dockerDaemonRuns, dockerSession, inspect } from './test-image/docker.ts';

/** Seconds `docker stop` waits before SIGKILL, as compose.yaml's stop_grace_period. */
const GRACE_SECONDS = 30;
/** The image's HEALTHCHECK command, probed every second here instead of every 15 s so the test does not idle. */
const HEALTH_INTERVAL = '1s';

const started = Date.now();
const elapsed = (since = started) => `${((Date.now() - since) / 1000).toFixed(1)} s`;

/** Runs one named check and prints `ok - <name>` with its duration; a failure propagates. */
async function check<T>(name: string, run: () => Promise<T>): Promise<T> {
  const since = Date.now();
  const value = await run();
  console.log(`ok - ${name} (${elapsed(since)})`);
  return value;
}

/** Throws `message` unless `condition` holds. */
function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new Error(message);
}

/** The exec-form CMD of the Dockerfile's HEALTHCHECK, to compare with the built image's. */
function dockerfileHealthcheck(): string[] {
  const text = readFileSync(join(ROOT, 'Dockerfile'), 'utf8').replace(/\\\n\s*/g, ' ');
  const cmd = /^HEALTHCHECK .*?CMD (\[.*\])\s*$/m.exec(text)?.[1];
  if (!cmd) throw new Error('the Dockerfile has no exec-form HEALTHCHECK');
  return JSON.parse(cmd) as string[];
}

/** `-e K=V` for each variable. */
const envArgs = (env: Record<string, string>) => Object.entries(env).flatMap(([k, v]) => ['-e', `${k}=${v}`]);

/** GET `url` as JSON, or undefined while nothing answers it. */
async function getJson<T>(url: string): Promise<{ status: number; body: T } | undefined> {
  try {
    const res = await fetch(url);
    return { status: res.status, body: (await res.json()) as T };
  } catch {
    return undefined;
  }
}

/** Waits until the customer's report at `base` counts `placed` orders. */
async function reportCounts(base: string, customerId: string, placed: number): Promise<void> {
  await eventually(async () => (await getJson<{ ordersPlaced?: number }>(`${base}/reports/customers/${customerId}`))?.body.ordersPlaced === placed, {
    timeoutMs: 30_000,
    everyMs: 200,
    what: `${placed} order(s) in the report of ${customerId} at ${base}`,
  });
}

/** POST /orders at `base`; returns the new order's id. */
async function placeOrder(base: string, customerId: string): Promise<string> {
  const res = await fetch(`${base}/orders`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(orderBody({ customerId })),
  });
  const text = await res.text();
  assert(res.status === 201, `POST /orders answered ${res.status}: ${text}`);
  return (JSON.parse(text) as { orderId: string }).orderId;
}

/** docker stop within the grace period, exit code 0. */
async function stopsCleanly(container: string): Promise<void> {
  const stop = await stopWithin(container, GRACE_SECONDS);
  assert(stop.exitCode === 0 && !stop.oomKilled, `${container} exited ${stop.exitCode} after docker stop\n${await logs(container)}`);
  assert(stop.seconds < GRACE_SECONDS, `${container} took ${stop.seconds} s to stop (grace ${GRACE_SECONDS} s)`);
}

if (!(await dockerDaemonRuns())) {
  console.log('test:image skipped: no Docker daemon (`docker info` failed)');
  process.exit(0);
}

const session = dockerSession('hono-outbox-test-image');
const image = `${session.name('image')}:test`;
let nats: NatsServer | undefined;
const running: string[] = [];
let failed = false;
// Ctrl-C mid-run: remove what was created so far, as the normal end does
process.once('SIGINT', () => void Promise.allSettled([session.dispose(), nats?.[Symbol.asyncDispose]()]).then(() => process.exit(130)));
try {
  // host network: `npm ci` reaches the registry as this machine does
  await check('the image builds from the Dockerfile', () => session.build(image, ROOT, ['--network', 'host']));

  await check('the image holds the compiled service, its migrations and production dependencies only, and runs as node', async () => {
    assert((await inspect(image, '{{.Config.User}}')) === 'node', 'the image does not run as user node');
    const healthcheck = JSON.parse(await inspect(image, '{{json .Config.Healthcheck.Test}}')) as string[];
    assert(JSON.stringify(healthcheck) === JSON.stringify(['CMD', ...dockerfileHealthcheck()]), `unexpected HEALTHCHECK ${JSON.stringify(healthcheck)}`);
    const probe = `const fs=require('node:fs');console.log(JSON.stringify(process.argv.slice(1).filter(p=>fs.existsSync(p))))`;
    const wanted = [
      'dist/entry/node.js',
      'db/migrations/meta/_journal.json',
      'db/subscribers/reporting/meta/_journal.json',
      'db/subscribers/notifications/meta/_journal.json',
      'node_modules/@libsql/client',
    ];
    const unwanted = [
      'src',
      'test',
      '.git',
      'data/app.db',
      ...['typescript', 'tsx', 'vitest', 'wrangler', 'drizzle-kit', 'bun', 'deno'].map((d) => `node_modules/${d}`),
    ];
    const present = JSON.parse(await docker(['run', '--rm', '--network', 'none', image, 'node', '-e', probe, ...wanted, ...unwanted])) as string[];
    assert(
      wanted.every((p) => present.includes(p)),
      `the image lacks ${wanted.filter((p) => !present.includes(p)).join(', ')}`,
    );
    assert(!unwanted.some((p) => present.includes(p)), `the image holds ${unwanted.filter((p) => present.includes(p)).join(', ')}`);
    console.log(`   image size ${(Number(await inspect(image, '{{.Size}}')) / 1e6).toFixed(0)} MB`);
  });

  nats = await startNats();
  const volume = await session.volume('data');
  const common = ['--network', 'host', '--health-interval', HEALTH_INTERVAL, '-v', `${volume}:/app/data`];
  const env = { HOST: '127.0.0.1', NATS_URL: nats.url, LOG_LEVEL: 'warn' };
  const customerId = `cust-${session.name('c')}`;

  const port = await freePort();
  const api = `http://127.0.0.1:${port}`;
  const all = await session.run('all', [...common, ...envArgs({ ...env, PORT: String(port) }), image]);
  running.push(all);
  await check('all roles in one container: the HEALTHCHECK turns healthy', () => waitHealthy(all));
  await check('its process runs as uid 1000', async () => {
    const uid = await mainProcessUid(all);
    assert(uid === 1000, `PID 1 runs as uid ${uid}`);
  });
  const orderId = await check('an order placed over HTTP reaches the read model (GET /reports/customers/:id)', async () => {
    const id = await placeOrder(api, customerId);
    await reportCounts(api, customerId, 1);
    return id;
  });
  await check(`docker stop (SIGTERM) ends it inside the ${GRACE_SECONDS} s grace period with exit 0`, () => stopsCleanly(all));

  const again = await session.run('all-again', [...common, ...envArgs({ ...env, PORT: String(port) }), image]);
  running.push(again);
  await check('a new container on the same volume keeps the order and the read model, applied once', async () => {
    await waitHealthy(again);
    const order = await getJson<{ id?: string; orderId?: string }>(`${api}/orders/${orderId}`);
    assert(order?.status === 200, `GET /orders/${orderId} answered ${order?.status}`);
    await new Promise((r) => setTimeout(r, 1000)); // time for a redelivery to be (wrongly) applied twice
    await reportCounts(api, customerId, 1);
  });
  await stopsCleanly(again);

  const [apiPort, relayPort, consumersPort] = [await freePort(), await freePort(), await freePort()];
  const split = {
    api: await session.run('api', [...common, ...envArgs({ ...env, ROLES: 'api', PORT: String(apiPort) }), image]),
    relay: await session.run('relay', [...common, ...envArgs({ ...env, ROLES: 'relay', METRICS_PORT: String(relayPort) }), image]),
    consumers: await session.run('consumers', [...common, ...envArgs({ ...env, ROLES: 'consumers', METRICS_PORT: String(consumersPort) }), image]),
  };
  running.push(...Object.values(split));
  await check('api-only, relay-only (ROLES=relay + METRICS_PORT) and consumers-only (ROLES=consumers + METRICS_PORT) containers turn healthy', async () => {
    await Promise.all(Object.values(split).map((c) => waitHealthy(c)));
  });
  await check('an order placed on the api-only container reaches the read model of the consumers-only one', async () => {
    await placeOrder(`http://127.0.0.1:${apiPort}`, customerId);
    await reportCounts(`http://127.0.0.1:${consumersPort}`, customerId, 2);
  });
  await check('docker stop ends each of the three inside the grace period with exit 0', async () => {
    await Promise.all(Object.values(split).map((c) => stopsCleanly(c)));
  });
} catch (error) {
  failed = true;
  console.error(`not ok - ${error instanceof Error ? error.message : String(error)}`);
  for (const container of running) console.error(await logs(container));
} finally {
  await session.dispose();
  await nats?.[Symbol.asyncDispose]();
}
console.log(`${failed ? 'test:image FAILED' : 'test:image passed'} in ${elapsed()}`);
process.exit(failed ? 1 : 0);
