// The README's "Make it yours" recipe, walked in a temp copy of the repository: the example (POST
// /orders/:id/ship → order.shipped.v1, a `shipping` subscriber with its own table) scaffolded with `npm run new`, the
// handler and its test filled in by hand, the service renamed, then the whole project typechecked and the unit and
// integration suites run, the generated tests among them.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DEFAULT_SERVICE_NAME, streamNameOf } from '../../src/service-name.ts';
import { runGroupToExit } from '../support/process-group.ts';
import { copyRepository } from '../support/repository-copy.ts';

/** Runs a command in `cwd` to its end, in a process group killed after `timeoutMs`. */
const runIn = (cwd: string, cmd: string, args: string[], timeoutMs = 60_000) => runGroupToExit(cmd, args, { TEMPLATE_TESTS: '' }, { cwd, timeoutMs });

/** Every file under `dir` (node_modules aside) with a hash of its content, to tell what a step changed. */
function snapshot(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (at: string) => {
    for (const entry of readdirSync(at)) {
      const path = join(at, entry);
      if (entry === 'node_modules' || entry === 'data') continue;
      if (statSync(path).isDirectory()) walk(path);
      else out.set(relative(dir, path), createHash('sha1').update(readFileSync(path)).digest('hex'));
    }
  };
  walk(dir);
  return out;
}

/** The files created or changed between two snapshots, sorted. */
const changed = (before: Map<string, string>, after: Map<string, string>) =>
  [...after]
    .filter(([path, hash]) => before.get(path) !== hash)
    .map(([path]) => path)
    .sort();

/** The name for the renamed service (another if a clone already took it). */
const NEW_NAME = (DEFAULT_SERVICE_NAME as string) === 'acme-shipping' ? 'acme-freight' : 'acme-shipping';

/** What the user writes in the generated handler: load the order, refuse 404/409, bump its version, emit. */
const SHIP_ORDER = `import { z } from 'zod';
import { sqlOf, type Tx } from '../../db/open-database.ts';
import { ConflictError, NotFoundError } from '../../errors.ts';
import { safeText } from '../../events/safe-text.ts';
import { ok, refuse, type Command, type CommandOutcome } from '../../http/command-route.ts';
import type { OrderShippedV1 } from './events.ts';
import { loadOrder } from './store.ts';

/** Body of \`POST /orders/:id/ship\`. */
export const ShipOrderBody = z.strictObject({
  carrier: safeText().min(1).max(200),
  trackingNumber: safeText().min(1).max(200),
});

/** Ships the order \`cmd.params.id\` (404 unknown, 409 cancelled): its next version and \`order.shipped.v1\` in the caller's write transaction. */
export async function shipOrder(tx: Tx, body: z.output<typeof ShipOrderBody>, cmd: Command): Promise<CommandOutcome> {
  const orderId = cmd.params.id!;
  const order = await loadOrder(tx, orderId);
  if (!order) return refuse(new NotFoundError(\`Order \${orderId} does not exist.\`));
  if (order.status === 'cancelled') return refuse(new ConflictError(\`Order \${orderId} is cancelled.\`));
  const version = order.version + 1;
  await sqlOf(tx).execute({ sql: 'UPDATE orders SET version = ? WHERE id = ? AND version = ?', args: [version, orderId, order.version] });
  const data: OrderShippedV1 = { orderId, ...body };
  await cmd.emit([{ eventId: cmd.newId(), type: 'order.shipped.v1', aggregateType: 'order', aggregateId: orderId, aggregateVersion: version, occurredAt: cmd.now.toISOString(), data }]);
  return ok(data);
}
`;

/** What the user makes of the generated command test once the handler needs an order to exist. */
const SHIP_ORDER_TEST = `import { describe, expect, it } from 'vitest';
import { APP_MIGRATIONS } from '../../../src/entry/boot.ts';
import { modules } from '../../../src/modules.ts';
import { countRows, createTestApp } from '../../support/db.ts';
import { orderBody } from '../../support/example-orders.ts';
import { expectProblem, postJson } from '../../support/http.ts';

/** The service's own app (its contexts and migrations) over a fresh database. */
const createServiceApp = () => createTestApp({ modules, migrations: APP_MIGRATIONS.service });

const body = { carrier: 'ups', trackingNumber: '1Z999AA10123456784' };

describe('orders - ship', () => {
  it('answers 200 and stores order.shipped.v1 at the order\\'s next version, after order.placed.v1', async () => {
    await using t = await createServiceApp();
    const { orderId } = (await (await postJson(t.app, '/orders', orderBody())).json()) as { orderId: string };
    const res = await postJson(t.app, \`/orders/\${orderId}/ship\`, body);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ orderId, ...body });
    const { rows } = await t.client.execute('SELECT message_type, payload FROM outbox ORDER BY seq');
    expect(rows.map((r) => r.message_type)).toEqual(['order.placed.v1', 'order.shipped.v1']);
    expect(JSON.parse(String(rows[1]!.payload))).toMatchObject({ aggregateId: orderId, aggregateVersion: 2, data: { orderId, ...body } });
  });

  it('refuses an unknown order with 404 and a cancelled one with 409, storing no event', async () => {
    await using t = await createServiceApp();
    await expectProblem(await postJson(t.app, '/orders/nope/ship', body), 404);
    const { orderId } = (await (await postJson(t.app, '/orders', orderBody())).json()) as { orderId: string };
    expect((await postJson(t.app, \`/orders/\${orderId}/cancel\`)).status).toBe(200);
    await expectProblem(await postJson(t.app, \`/orders/\${orderId}/ship\`, body), 409);
    expect(await countRows(t.client, 'outbox', 'message_type = ?', ['order.shipped.v1'])).toBe(0);
  });
});
`;

describe('make it yours - npm run new', () => {
  it('refuses a bad command line with exit 2 and changes nothing', async () => {
    using copy = copyRepository('hono-make-it-yours-');
    const repo = copy.dir;
    const before = snapshot(repo);
    const bad = [
      ['frobnicate', 'x'],
      ['command', 'Ship', '--context', 'orders'],
      ['command', 'ship'],
      ['command', 'ship', '--context', 'nowhere'],
      ['command', 'cancel', '--context', 'orders', '--event', 'order.cancel-requested.v1'],
      ['subscriber', 'shipping', '--on', 'order.shipped.v1'],
      ['subscriber', 'reporting', '--on', 'order.placed.v1'],
      ['rename', 'Acme Shipping'],
      ['command', 'ship', '--context', 'orders', '--fields', 'carrier:string:int'],
      ['event', 'order-placed.v1', '--context', 'orders'],
      ['context', 'delete'],
      ['subscriber', 'delete', '--on', 'order.placed.v1'],
      ['subscriber', 'eq', '--on', 'order.placed.v1'],
      ['subscriber', 'shipments', '--on', 'order.placed.v1', '--table', 'shipments'],
      ['subscriber', 'audit', '--on', 'order.placed.v1', '--table', 'sqlite_audit'],
    ];
    for (const args of bad) {
      const run = await runIn(repo, process.execPath, ['--import', 'tsx', 'scripts/new.ts', ...args]);
      expect(run.code, `${args.join(' ')}\n${run.output}`).toBe(2);
      expect(run.output).toContain('usage: npm run new');
    }
    expect(changed(before, snapshot(repo))).toEqual([]);
  });

  it('renames again from a name that is not also a word, and refuses to rename from one that names routes and tables', async () => {
    using copy = copyRepository('hono-make-it-yours-');
    const repo = copy.dir;
    const rename = (name: string) => runIn(repo, process.execPath, ['--import', 'tsx', 'scripts/new.ts', 'rename', name]);
    const serviceName = () => /DEFAULT_SERVICE_NAME = '([^']+)'/.exec(readFileSync(join(repo, 'src/service-name.ts'), 'utf8'))?.[1];
    for (const name of ['acme-shipping', 'acme-freight', 'orders']) {
      const run = await rename(name);
      expect(run.code, run.output).toBe(0);
      expect(serviceName()).toBe(name);
    }
    expect(readFileSync(join(repo, 'src/contexts/orders/context.ts'), 'utf8')).toContain("basePath: '/orders'");
    const before = snapshot(repo);
    const run = await rename('shop');
    expect(run.code, run.output).toBe(2);
    expect(run.output).toMatch(/also names other things[\s\S]*:\d+ \(a (value|table|path or route segment)\)/);
    expect(changed(before, snapshot(repo))).toEqual([]);
  });

  it("registers another aggregate's event under its own type, and db:generate fails on a schema drizzle-kit cannot load", async () => {
    using copy = copyRepository('hono-make-it-yours-');
    const repo = copy.dir;
    const scaffold = await runIn(repo, 'npm', [
      'run',
      'new',
      '--',
      'command',
      'ship',
      '--context',
      'orders',
      '--aggregate',
      'shipment',
      '--fields',
      'carrier:string',
    ]);
    expect(scaffold.code, scaffold.output).toBe(0);
    expect(readFileSync(join(repo, 'src/contexts/orders/events.ts'), 'utf8')).toContain(
      "'shipment.shipped.v1': { aggregate: 'shipment', data: ShipmentShippedV1 }",
    );
    const generated = await runIn(repo, 'npx', ['vitest', 'run', 'test/contexts/orders/ship.int.spec.ts'], 120_000);
    expect(generated.code, generated.output.slice(-4000)).toBe(0);

    const tables = join(repo, 'src/subscribers/reporting/tables.ts');
    writeFileSync(tables, `${readFileSync(tables, 'utf8')}\nexport const broken = ;\n`);
    const dbGenerate = await runIn(repo, 'npm', ['run', 'db:generate', '--', 'reporting'], 120_000);
    expect(dbGenerate.code, dbGenerate.output).toBe(1);
    expect(dbGenerate.output).toContain('drizzle-kit generate failed for reporting');
  }, 240_000);

  it('ship + shipping + rename: 2 files written by hand; tsc, the unchanged unit and integration suites and the generated tests pass', async () => {
    using copy = copyRepository('hono-make-it-yours-');
    const repo = copy.dir;
    const byHand = new Set<string>();
    const writeByHand = (path: string, text: string) => {
      byHand.add(path);
      writeFileSync(join(repo, path), text);
    };
    const npmNew = async (...args: string[]) => {
      const run = await runIn(repo, 'npm', ['run', 'new', '--', ...args]);
      expect(run.code, run.output).toBe(0);
    };

    // 1. the command and its event
    let before = snapshot(repo);
    await npmNew('command', 'ship', '--context', 'orders', '--fields', 'carrier:string,trackingNumber:string');
    expect(changed(before, snapshot(repo))).toEqual([
      'docs/asyncapi.yaml',
      'src/contexts/orders/events.ts',
      'src/contexts/orders/routes.ts',
      'src/contexts/orders/ship-order.ts',
      'test/contexts/orders/ship.int.spec.ts',
    ]);
    writeByHand('src/contexts/orders/ship-order.ts', SHIP_ORDER);
    writeByHand('test/contexts/orders/ship.int.spec.ts', SHIP_ORDER_TEST);

    // 2. the subscriber, its own table and its migrations
    before = snapshot(repo);
    await npmNew('subscriber', 'shipping', '--on', 'order.shipped.v1', '--table', 'shipments');
    const subscriberFiles = changed(before, snapshot(repo));
    expect(subscriberFiles.filter((f) => !f.startsWith('db/'))).toEqual([
      'docs/asyncapi.yaml',
      'src/modules.ts',
      'src/subscribers/shipping/subscriber.ts',
      'src/subscribers/shipping/tables.ts',
      'test/subscribers/shipping.int.spec.ts',
    ]);
    const migration = subscriberFiles.find((f) => /^db\/subscribers\/shipping\/0000_\w+\.sql$/.test(f));
    expect(readFileSync(join(repo, migration!), 'utf8')).toMatch(/CREATE TABLE `shipments`[\s\S]*`tracking_number` text NOT NULL/);
    expect(subscriberFiles).toContain('db/subscribers/shipping/meta/_journal.json');

    // 3. the service's name, everywhere the repository spells it
    await npmNew('rename', NEW_NAME);
    expect(JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')).name).toBe(NEW_NAME);
    expect(JSON.parse(readFileSync(join(repo, 'package-lock.json'), 'utf8')).packages[''].name).toBe(NEW_NAME);
    expect(readFileSync(join(repo, 'src/service-name.ts'), 'utf8')).toContain(`DEFAULT_SERVICE_NAME = '${NEW_NAME}'`);
    const oldName = new RegExp(`(?<![\\w-])${DEFAULT_SERVICE_NAME}(?!\\w)|(?<!\\w)${streamNameOf(DEFAULT_SERVICE_NAME)}(?!\\w)`);
    expect([...snapshot(repo).keys()].filter((f) => oldName.test(readFileSync(join(repo, f), 'utf8')))).toEqual([]);

    expect(byHand.size).toBeLessThanOrEqual(6);

    // 4. everything compiles, and the suites pass with the generated tests among them
    const tsc = await runIn(repo, 'npx', ['tsc', '-p', '.'], 120_000);
    expect(tsc.code, tsc.output).toBe(0);
    const results = join(repo, 'vitest-results.json');
    // the core's suites, the example's and the generated tests (foreign-lock's liveness bounds are about timing,
    // not layout: it runs in the main suite, not in a copy that shares the cores with it); three files at a time, since
    // the other template file runs its own suite beside this one
    const suites = ['test/unit', 'test/int', 'test/example', 'test/contexts', 'test/subscribers'];
    const vitest = await runIn(
      repo,
      'npx',
      [
        'vitest',
        'run',
        ...suites,
        '--maxWorkers=3',
        '--exclude',
        'test/int/foreign-lock.int.spec.ts',
        '--reporter=dot',
        '--reporter=json',
        `--outputFile.json=${results}`,
      ],
      // about two minutes on an idle 2-core machine; four or more on a slow one, beside the other template file
      480_000,
    );
    expect(vitest.code, vitest.output.slice(-6000)).toBe(0);
    const report = JSON.parse(readFileSync(results, 'utf8')) as { numFailedTests: number; testResults: Array<{ name: string; status: string }> };
    expect(report.numFailedTests).toBe(0);
    const passed = report.testResults.filter((r) => r.status === 'passed').map((r) => relative(repo, r.name));
    expect(passed).toEqual(
      expect.arrayContaining(['test/int/relay.int.spec.ts', 'test/contexts/orders/ship.int.spec.ts', 'test/subscribers/shipping.int.spec.ts']),
    );
  }, 600_000);
});
