// Migrations applied to a database that already holds data: drizzle-kit's table rebuilds, foreign keys, failures.
import { createClient, type Client } from '@libsql/client';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { migrateDatabase, MigrationError } from '../../src/db/migrate.ts';
import { createDatabase, prepareLocalDatabase } from '../../src/db/open-database.ts';
import { createDeps } from '../../src/deps.ts';
import { silentLogger } from '../../src/logger.ts';
import { placeOrder } from '../../src/orders/place-order.ts';
import { createTempDir, MIGRATIONS, orderBody } from '../support/db.ts';
import { runtimeCommand, runToExit } from '../support/process.ts';

const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

function tempDir(): string {
  const tmp = createTempDir('hono-migrate-');
  cleanups.push(() => tmp[Symbol.dispose]());
  return tmp.dir;
}

type Journal = { version: string; dialect: string; entries: Array<{ idx: number; version: string; when: number; tag: string; breakpoints: boolean }> };

/** A migrations folder: the committed migrations followed by `extra` (name → SQL with drizzle-kit breakpoints), in order. */
function migrationsFolder(extra: Array<[name: string, sql: string]>): { folder: string; tags: string[] } {
  const folder = join(tempDir(), 'migrations');
  cpSync(MIGRATIONS, folder, { recursive: true });
  const journalPath = join(folder, 'meta', '_journal.json');
  const journal = JSON.parse(readFileSync(journalPath, 'utf8')) as Journal;
  const tags: string[] = [];
  for (const [name, sql] of extra) {
    const last = journal.entries.at(-1)!;
    const idx = journal.entries.length;
    const tag = `${String(idx).padStart(4, '0')}_${name}`;
    journal.entries.push({ idx, version: last.version, when: last.when + 1000, tag, breakpoints: true });
    writeFileSync(join(folder, `${tag}.sql`), sql);
    tags.push(tag);
  }
  writeFileSync(journalPath, JSON.stringify(journal, null, 2));
  return { folder, tags };
}

/** drizzle-kit's SQLite rebuild of `orders` (adding a column), as `drizzle-kit generate` writes it; `where` filters the copy. */
function rebuildOrders(where = ''): string {
  return [
    'PRAGMA foreign_keys=OFF;',
    `CREATE TABLE \`__new_orders\` (
\t\`id\` text PRIMARY KEY NOT NULL,
\t\`customer_id\` text NOT NULL,
\t\`currency\` text NOT NULL,
\t\`status\` text NOT NULL,
\t\`total_cents\` integer NOT NULL,
\t\`version\` integer NOT NULL,
\t\`placed_at\` integer NOT NULL,
\t\`cancelled_at\` integer,
\t\`cancel_reason\` text,
\t\`channel\` text DEFAULT 'web' NOT NULL,
\tCONSTRAINT "orders_status_check" CHECK("__new_orders"."status" IN ('placed','cancelled'))
);`,
    `INSERT INTO \`__new_orders\`("id", "customer_id", "currency", "status", "total_cents", "version", "placed_at", "cancelled_at", "cancel_reason") SELECT "id", "customer_id", "currency", "status", "total_cents", "version", "placed_at", "cancelled_at", "cancel_reason" FROM \`orders\`${where};`,
    'DROP TABLE `orders`;',
    'ALTER TABLE `__new_orders` RENAME TO `orders`;',
    'PRAGMA foreign_keys=ON;',
    'CREATE INDEX `idx_orders_customer` ON `orders` (`customer_id`);',
  ].join('--> statement-breakpoint\n');
}

/** A database migrated with the committed migrations and holding two orders (with their lines and events). */
async function populatedDatabase(): Promise<{ url: string; client: Client }> {
  const url = `file:${join(tempDir(), 'app.db')}`;
  const client = createClient({ url, timeout: 5000 });
  cleanups.push(() => client.close());
  await prepareLocalDatabase(client);
  await migrateDatabase(client, MIGRATIONS);
  const deps = createDeps(createDatabase(client), silentLogger);
  for (const customerId of ['a', 'b']) await deps.writer.write((tx) => placeOrder(tx, deps, orderBody({ customerId }) as never));
  return { url, client };
}

async function rows(client: Client, sql: string): Promise<unknown[][]> {
  return (await client.execute(sql)).rows.map((r) => Array.from(r));
}

const ORDERS = 'SELECT id, customer_id, total_cents, version FROM orders ORDER BY customer_id';
const LINES = 'SELECT order_id, line_no, sku, quantity FROM order_lines ORDER BY order_id, line_no';

/** Foreign keys are enforced on the client's connections: a line for a missing order is refused. */
async function expectForeignKeysEnforced(client: Client): Promise<void> {
  expect(await rows(client, 'PRAGMA foreign_keys')).toEqual([[1]]);
  await expect(
    client.execute("INSERT INTO order_lines (order_id, line_no, sku, quantity, unit_price_cents) VALUES ('no-such-order', 1, 's', 1, 1)"),
  ).rejects.toThrow(/FOREIGN KEY/);
}

describe('migrations - on a database that holds data', () => {
  it('a drizzle-kit rebuild of a referenced table applies, keeps every row, and leaves foreign keys enforced', async () => {
    const { client } = await populatedDatabase();
    const ordersBefore = await rows(client, ORDERS);
    const linesBefore = await rows(client, LINES);
    expect(ordersBefore).toHaveLength(2);
    const { folder } = migrationsFolder([['rebuild_orders', rebuildOrders()]]);

    expect(await migrateDatabase(client, folder)).toBe(1);

    expect(await rows(client, ORDERS)).toEqual(ordersBefore);
    expect(await rows(client, LINES)).toEqual(linesBefore);
    expect(await rows(client, 'SELECT DISTINCT channel FROM orders')).toEqual([['web']]);
    expect(await rows(client, 'PRAGMA foreign_key_check')).toEqual([]);
    await expectForeignKeysEnforced(client);
    expect(await migrateDatabase(client, folder)).toBe(0);
  });

  it('a rebuild that would leave lines without their order is refused with a MigrationError and rolled back whole', async () => {
    const { client } = await populatedDatabase();
    const ordersBefore = await rows(client, ORDERS);
    const applied = await rows(client, 'SELECT hash FROM __drizzle_migrations');
    const { folder } = migrationsFolder([
      ['add_notes', 'CREATE TABLE `notes` (`id` text PRIMARY KEY NOT NULL);'],
      ['rebuild_orders_losing_b', rebuildOrders(" WHERE customer_id != 'b'")],
    ]);

    const error = await migrateDatabase(client, folder).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(MigrationError);
    expect((error as MigrationError).index).toBe(JSON.parse(readFileSync(join(folder, 'meta/_journal.json'), 'utf8')).entries.length - 1);
    expect((error as Error).message).toMatch(/foreign key.*order_lines/);

    expect(await rows(client, ORDERS)).toEqual(ordersBefore);
    expect(await rows(client, "SELECT name FROM sqlite_master WHERE name IN ('notes', '__new_orders')")).toEqual([]);
    expect(await rows(client, 'SELECT hash FROM __drizzle_migrations')).toEqual(applied);
    await expectForeignKeysEnforced(client);
  });

  it('a migration with bad SQL fails as a MigrationError naming its statement, and none of its statements stay applied', async () => {
    const { client } = await populatedDatabase();
    const { folder, tags } = migrationsFolder([['broken', 'CREATE TABLE `notes` (`id` text);--> statement-breakpoint\nCREATE TABLEX oops;']]);

    const error = await migrateDatabase(client, folder).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(MigrationError);
    expect((error as MigrationError).detail).toMatch(/^failed at statement 2: .*syntax error/);
    const journal = JSON.parse(readFileSync(join(folder, 'meta/_journal.json'), 'utf8')) as Journal;
    expect(journal.entries[(error as MigrationError).index]!.tag).toBe(tags[0]);
    expect(await rows(client, "SELECT name FROM sqlite_master WHERE name = 'notes'")).toEqual([]);
    await expectForeignKeysEnforced(client);
  });
});

describe('migrations - the migrate entry and service start-up', () => {
  /** A database file whose `orders` table exists although no migration was recorded: 0000_init fails on it. */
  async function databaseThatFailsInit(): Promise<string> {
    const url = `file:${join(tempDir(), 'app.db')}`;
    const c = createClient({ url });
    await c.execute('CREATE TABLE orders (id TEXT)');
    c.close();
    return url;
  }

  it.each([
    ['npm run db:migrate (src/entry/migrate.ts)', 'src/entry/migrate.ts'],
    ['service start-up (src/entry/node.ts)', 'src/entry/node.ts'],
  ])('%s: a failing migration exits 1 with one line naming its file and the cause, no stack trace', async (_label, entry) => {
    const url = await databaseThatFailsInit();
    const { cmd, args } = runtimeCommand('node', entry);
    const r = await runToExit(cmd, args, { DATABASE_URL: url, ROLES: 'api', PORT: '0', NATS_URL: 'nats://127.0.0.1:1', LOG_LEVEL: 'warn' }, 30_000);
    expect(r.code, r.stdout + r.stderr).toBe(1);
    const lines = r.stderr.split('\n').filter((l) => l.trim());
    expect(lines, r.stderr).toHaveLength(1);
    expect(lines[0]).toMatch(/^Migration db\/migrations\/0000_init\.sql failed at statement \d+: .*already exists/);
    expect(r.stderr).not.toMatch(/^\s+at /m);
  });

  it('four migrate processes started together on one new file apply each migration exactly once', async () => {
    const url = `file:${join(tempDir(), 'app.db')}`;
    const { cmd, args } = runtimeCommand('node', 'src/entry/migrate.ts');
    const runs = await Promise.all(Array.from({ length: 4 }, () => runToExit(cmd, args, { DATABASE_URL: url }, 30_000)));
    for (const r of runs) expect(r.code, r.stdout + r.stderr).toBe(0);
    const committed = (JSON.parse(readFileSync(join(MIGRATIONS, 'meta/_journal.json'), 'utf8')) as Journal).entries.length;
    const applied = runs.map((r) => Number(/^(\d+) migration/m.exec(r.stdout)?.[1]));
    expect(applied.reduce((a, b) => a + b, 0)).toBe(committed);
    const c = createClient({ url });
    cleanups.push(() => c.close());
    expect(await rows(c, 'SELECT count(*) FROM __drizzle_migrations')).toEqual([[committed]]);
  });
});
