// Migrations applied to a database that already holds data: drizzle-kit's table rebuilds, foreign keys, failures.
import { createClient, type Client } from '@libsql/client';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { migrateDatabase, MigrationError } from '../../src/db/migrate.ts';
import { createDatabase, prepareLocalDatabase } from '../../src/db/open-database.ts';
import { createDeps } from '../../src/deps.ts';
import { MIGRATIONS_FOLDER } from '../../src/entry/boot.ts';
import { registryOf } from '../../src/compose/define-modules.ts';
import { silentLogger } from '../../src/logger.ts';
import { accountCommands } from '../support/accounts.ts';
import { createTempDir } from '../support/db.ts';
import { fixtureModules } from '../support/fixture/modules.ts';
import { migrationsFolder as migrationsFolderIn, type Journal } from '../support/migrations-folder.ts';
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

/** A migrations folder: the committed migrations followed by `extra` (name → SQL with drizzle-kit breakpoints), in order. */
const migrationsFolder = (extra: ReadonlyArray<readonly [name: string, sql: string]>) => migrationsFolderIn(tempDir(), extra);

/** A table referencing `accounts` (the fixture has none of its own): what makes a rebuild of `accounts` delicate. */
const HOLDERS: [name: string, sql: string] = [
  'account_holders',
  'CREATE TABLE `account_holders` (\n\t`account_id` text NOT NULL,\n\t`name` text NOT NULL,\n\tPRIMARY KEY(`account_id`, `name`),\n\tFOREIGN KEY (`account_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE no action\n);',
];

/** drizzle-kit's SQLite rebuild of `accounts` (adding a column), as `drizzle-kit generate` writes it; `where` filters the copy. */
function rebuildAccounts(where = ''): string {
  return [
    'PRAGMA foreign_keys=OFF;',
    `CREATE TABLE \`__new_accounts\` (
\t\`id\` text PRIMARY KEY NOT NULL,
\t\`owner\` text NOT NULL,
\t\`balance_cents\` integer NOT NULL,
\t\`status\` text NOT NULL,
\t\`version\` integer NOT NULL,
\t\`opened_at\` integer NOT NULL,
\t\`currency\` text DEFAULT 'EUR' NOT NULL
);`,
    `INSERT INTO \`__new_accounts\`("id", "owner", "balance_cents", "status", "version", "opened_at") SELECT "id", "owner", "balance_cents", "status", "version", "opened_at" FROM \`accounts\`${where};`,
    'DROP TABLE `accounts`;',
    'ALTER TABLE `__new_accounts` RENAME TO `accounts`;',
    'PRAGMA foreign_keys=ON;',
  ].join('--> statement-breakpoint\n');
}

/**
 * A database migrated with the fixture's migrations and `account_holders`, holding two accounts (with their events)
 * and a holder of each.
 */
async function populatedDatabase(): Promise<{ url: string; client: Client }> {
  const url = `file:${join(tempDir(), 'app.db')}`;
  const client = createClient({ url, timeout: 5000 });
  cleanups.push(() => client.close());
  await prepareLocalDatabase(client);
  await migrateDatabase(client, migrationsFolder([HOLDERS]).folder);
  const accounts = accountCommands(createDeps(createDatabase(client), silentLogger, registryOf(fixtureModules)));
  for (const owner of ['a', 'b']) {
    const id = await accounts.open(owner);
    await client.execute({ sql: 'INSERT INTO account_holders (account_id, name) VALUES (?, ?)', args: [id, `holder of ${owner}`] });
  }
  return { url, client };
}

async function rows(client: Client, sql: string): Promise<unknown[][]> {
  return (await client.execute(sql)).rows.map((r) => Array.from(r));
}

const ACCOUNTS = 'SELECT id, owner, balance_cents, version FROM accounts ORDER BY owner';
const HOLDER_ROWS = 'SELECT account_id, name FROM account_holders ORDER BY account_id';

/** Foreign keys are enforced on the client's connections: a holder of a missing account is refused. */
async function expectForeignKeysEnforced(client: Client): Promise<void> {
  expect(await rows(client, 'PRAGMA foreign_keys')).toEqual([[1]]);
  await expect(client.execute("INSERT INTO account_holders (account_id, name) VALUES ('no-such-account', 'x')")).rejects.toThrow(/FOREIGN KEY/);
}

describe('migrations - on a database that holds data', () => {
  it('a drizzle-kit rebuild of a referenced table applies, keeps every row, and leaves foreign keys enforced', async () => {
    const { client } = await populatedDatabase();
    const accountsBefore = await rows(client, ACCOUNTS);
    const holdersBefore = await rows(client, HOLDER_ROWS);
    expect(accountsBefore).toHaveLength(2);
    const { folder } = migrationsFolder([HOLDERS, ['rebuild_accounts', rebuildAccounts()]]);

    expect(await migrateDatabase(client, folder)).toBe(1);

    expect(await rows(client, ACCOUNTS)).toEqual(accountsBefore);
    expect(await rows(client, HOLDER_ROWS)).toEqual(holdersBefore);
    expect(await rows(client, 'SELECT DISTINCT currency FROM accounts')).toEqual([['EUR']]);
    expect(await rows(client, 'PRAGMA foreign_key_check')).toEqual([]);
    await expectForeignKeysEnforced(client);
    expect(await migrateDatabase(client, folder)).toBe(0);
  });

  it("a rebuild keeps the rebuilt table's triggers (drizzle-kit's DROP TABLE takes them along); one the migration drops by name stays dropped", async () => {
    const { client } = await populatedDatabase();
    const audit: [name: string, sql: string] = [
      'audit_owner',
      [
        'CREATE TABLE `owner_changes` (`account_id` text NOT NULL, `owner` text NOT NULL);',
        'CREATE TRIGGER `accounts_owner_audit` AFTER UPDATE OF `owner` ON `accounts` BEGIN INSERT INTO `owner_changes` VALUES (NEW.`id`, NEW.`owner`); END;',
        "CREATE TRIGGER `accounts_no_delete` BEFORE DELETE ON `accounts` BEGIN SELECT RAISE(ABORT, 'accounts are never deleted'); END;",
      ].join('--> statement-breakpoint\n'),
    ];
    const { folder } = migrationsFolder([
      HOLDERS,
      audit,
      ['rebuild_accounts', `DROP TRIGGER IF EXISTS \`accounts_no_delete\`;--> statement-breakpoint\n${rebuildAccounts()}`],
    ]);

    expect(await migrateDatabase(client, folder)).toBe(2);

    expect(await rows(client, "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'accounts'")).toEqual([['accounts_owner_audit']]);
    await client.execute("UPDATE accounts SET owner = 'c' WHERE owner = 'a'");
    expect(await rows(client, 'SELECT owner FROM owner_changes')).toEqual([['c']]);
  });

  it('a rebuild that would leave rows without the row they reference is refused with a MigrationError and rolled back whole', async () => {
    const { client } = await populatedDatabase();
    const accountsBefore = await rows(client, ACCOUNTS);
    const applied = await rows(client, 'SELECT hash FROM __drizzle_migrations');
    const { folder } = migrationsFolder([
      HOLDERS,
      ['add_notes', 'CREATE TABLE `notes` (`id` text PRIMARY KEY NOT NULL);'],
      ['rebuild_accounts_losing_b', rebuildAccounts(" WHERE owner != 'b'")],
    ]);

    const error = await migrateDatabase(client, folder).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(MigrationError);
    expect((error as MigrationError).index).toBe(JSON.parse(readFileSync(join(folder, 'meta/_journal.json'), 'utf8')).entries.length - 1);
    expect((error as Error).message).toMatch(/foreign key.*account_holders/);

    expect(await rows(client, ACCOUNTS)).toEqual(accountsBefore);
    expect(await rows(client, "SELECT name FROM sqlite_master WHERE name IN ('notes', '__new_accounts')")).toEqual([]);
    expect(await rows(client, 'SELECT hash FROM __drizzle_migrations')).toEqual(applied);
    await expectForeignKeysEnforced(client);
  });

  it('a migration with bad SQL fails as a MigrationError naming its statement, and none of its statements stay applied', async () => {
    const { client } = await populatedDatabase();
    const { folder, tags } = migrationsFolder([HOLDERS, ['broken', 'CREATE TABLE `notes` (`id` text);--> statement-breakpoint\nCREATE TABLEX oops;']]);

    const error = await migrateDatabase(client, folder).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(MigrationError);
    expect((error as MigrationError).detail).toMatch(/^failed at statement 2: .*syntax error/);
    const journal = JSON.parse(readFileSync(join(folder, 'meta/_journal.json'), 'utf8')) as Journal;
    expect(journal.entries[(error as MigrationError).index]!.tag).toBe(tags[1]);
    expect(await rows(client, "SELECT name FROM sqlite_master WHERE name = 'notes'")).toEqual([]);
    await expectForeignKeysEnforced(client);
  });
});

describe('migrations - the migrate entry and service start-up', () => {
  /** A database file whose `outbox` table exists although no migration was recorded: 0000_init fails on it. */
  async function databaseThatFailsInit(): Promise<string> {
    const url = `file:${join(tempDir(), 'app.db')}`;
    const c = createClient({ url });
    await c.execute('CREATE TABLE outbox (id TEXT)');
    c.close();
    return url;
  }

  it.each([
    ['npm run db:migrate (src/entry/migrate.ts)', 'src/entry/migrate.ts', 'db/migrations'],
    ['service start-up (src/entry/node.ts)', 'src/entry/node.ts', 'db/migrations'],
    ['a composition with migrations of its own (the fixture entry)', 'test/support/fixture/entry.ts', 'test/support/fixture/db/migrations'],
  ])('%s: a failing migration exits 1 with one line naming its file and the cause, no stack trace', async (_label, entry, folder) => {
    const url = await databaseThatFailsInit();
    const { cmd, args } = runtimeCommand('node', entry);
    const r = await runToExit(cmd, args, { DATABASE_URL: url, ROLES: 'api', PORT: '0', NATS_URL: 'nats://127.0.0.1:1', LOG_LEVEL: 'warn' }, 30_000);
    expect(r.code, r.stdout + r.stderr).toBe(1);
    const lines = r.stderr.split('\n').filter((l) => l.trim());
    expect(lines, r.stderr).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^Migration ${folder}/0000_init\\.sql failed at statement \\d+: .*already exists`));
    expect(r.stderr).not.toMatch(/^\s+at /m);
  });

  it('four migrate processes started together on one new file apply each migration exactly once', async () => {
    const url = `file:${join(tempDir(), 'app.db')}`;
    const { cmd, args } = runtimeCommand('node', 'src/entry/migrate.ts');
    const runs = await Promise.all(Array.from({ length: 4 }, () => runToExit(cmd, args, { DATABASE_URL: url }, 30_000)));
    for (const r of runs) expect(r.code, r.stdout + r.stderr).toBe(0);
    const committed = (JSON.parse(readFileSync(join(MIGRATIONS_FOLDER, 'meta/_journal.json'), 'utf8')) as Journal).entries.length;
    const applied = runs.map((r) => Number(/^(\d+) migration/m.exec(r.stdout)?.[1]));
    expect(applied.reduce((a, b) => a + b, 0)).toBe(committed);
    const c = createClient({ url });
    cleanups.push(() => c.close());
    expect(await rows(c, 'SELECT count(*) FROM __drizzle_migrations')).toEqual([[committed]]);
  });
});
