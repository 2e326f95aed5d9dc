// migrateDatabase creates again the triggers a migration's statements dropped without saying so (a drizzle-kit
// rebuild of their table or view): names of any kind, statements later in the same migration, triggers that no
// longer fit.
import { createClient, type Client } from '@libsql/client';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { migrateDatabase, MigrationError } from '../../src/db/migrate.ts';
import { prepareLocalDatabase } from '../../src/db/open-database.ts';
import { createTempDir } from '../support/db.ts';
import { migrationsFolder as migrationsFolderIn, statements } from '../support/migrations-folder.ts';

const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

function tempDir(): string {
  const tmp = createTempDir('hono-migrate-triggers-');
  cleanups.push(() => tmp[Symbol.dispose]());
  return tmp.dir;
}

/** The fixture's service migrations followed by `extra` (name → statements), in a temp folder. */
const migrationsFolder = (extra: ReadonlyArray<readonly [name: string, statements: string[]]>): string =>
  migrationsFolderIn(
    tempDir(),
    extra.map(([name, sql]) => [name, statements(...sql)] as const),
  ).folder;

async function freshDatabase(): Promise<Client> {
  const client = createClient({ url: `file:${join(tempDir(), 'app.db')}`, timeout: 5000 });
  cleanups.push(() => client.close());
  await prepareLocalDatabase(client);
  return client;
}

/** drizzle-kit's SQLite rebuild of `accounts` (its columns as the fixture's schema has them, plus `currency`). */
const REBUILD_ACCOUNTS = [
  'PRAGMA foreign_keys=OFF;',
  "CREATE TABLE `__new_accounts` (\n\t`id` text PRIMARY KEY NOT NULL,\n\t`owner` text NOT NULL,\n\t`balance_cents` integer NOT NULL,\n\t`status` text NOT NULL,\n\t`version` integer NOT NULL,\n\t`opened_at` integer NOT NULL,\n\t`currency` text DEFAULT 'EUR' NOT NULL\n);",
  'INSERT INTO `__new_accounts`("id", "owner", "balance_cents", "status", "version", "opened_at") SELECT "id", "owner", "balance_cents", "status", "version", "opened_at" FROM `accounts`;',
  'DROP TABLE `accounts`;',
  'ALTER TABLE `__new_accounts` RENAME TO `accounts`;',
  'PRAGMA foreign_keys=ON;',
];

const OWNER_CHANGES = 'CREATE TABLE `owner_changes` (`account_id` text NOT NULL, `owner` text NOT NULL);';

async function triggerNames(client: Client): Promise<string[]> {
  return (await client.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")).rows.map((r) => String(r[0]));
}

async function insertAccount(client: Client, id: string, owner: string): Promise<void> {
  await client.execute({
    sql: "INSERT INTO accounts (id, owner, balance_cents, status, version, opened_at) VALUES (?, ?, 0, 'open', 1, 0)",
    args: [id, owner],
  });
}

describe('migrations - the triggers a rebuild drops with its table or view', () => {
  // a name that is not one word: only the statement kind tells that the drop was meant
  it.each([
    ['a hyphen', '`accounts-owner-audit`', 'accounts-owner-audit'],
    ['non-ASCII letters', '"prüfung"', 'prüfung'],
  ])('a trigger whose name has %s stays dropped when a migration says DROP TRIGGER for it', async (_, quotedName, name) => {
    const client = await freshDatabase();
    const folder = migrationsFolder([
      [
        'audit',
        [
          OWNER_CHANGES,
          `CREATE TRIGGER ${quotedName} AFTER UPDATE OF \`owner\` ON \`accounts\` BEGIN INSERT INTO \`owner_changes\` VALUES (NEW.\`id\`, NEW.\`owner\`); END;`,
        ],
      ],
      ['drop_audit', [`DROP TRIGGER ${quotedName};`]],
    ]);

    await migrateDatabase(client, folder);

    expect(await triggerNames(client)).not.toContain(name);
  });

  it('a rebuild after which a dropped trigger can no longer run fails the migration with a MigrationError, rolled back whole', async () => {
    // SQLite accepts CREATE TRIGGER whose body names a column the rebuilt table lost: unchecked, the migration would
    // commit and every later UPDATE of balance_cents fail with "no such column" instead of the migration being refused
    const client = await freshDatabase();
    await migrateDatabase(
      client,
      migrationsFolder([
        [
          'nickname',
          [
            'ALTER TABLE `accounts` ADD `nickname` text;',
            OWNER_CHANGES,
            'CREATE TRIGGER `accounts_balance_audit` AFTER UPDATE OF `balance_cents` ON `accounts` BEGIN INSERT INTO `owner_changes` VALUES (NEW.`id`, NEW.`nickname`); END;',
          ],
        ],
      ]),
    );
    await insertAccount(client, 'acc-1', 'ann');
    const folder = migrationsFolder([
      [
        'nickname',
        [
          'ALTER TABLE `accounts` ADD `nickname` text;',
          OWNER_CHANGES,
          'CREATE TRIGGER `accounts_balance_audit` AFTER UPDATE OF `balance_cents` ON `accounts` BEGIN INSERT INTO `owner_changes` VALUES (NEW.`id`, NEW.`nickname`); END;',
        ],
      ],
      // what drizzle-kit writes when `nickname` leaves the schema together with a change that needs a rebuild
      ['rebuild_without_nickname', REBUILD_ACCOUNTS],
    ]);

    const error = await migrateDatabase(client, folder).catch((e: unknown) => e);

    // (what went wrong otherwise: the migration applied, and the next deposit failed)
    if (!(error instanceof MigrationError)) {
      const deposit = await client.execute("UPDATE accounts SET balance_cents = 5 WHERE id = 'acc-1'").then(
        () => 'ok',
        (e: unknown) => String(e),
      );
      expect({ migration: 'applied', nextDeposit: deposit }).toEqual({ migration: 'refused with MigrationError', nextDeposit: 'ok' });
    }
    expect(error).toBeInstanceOf(MigrationError);
    expect((await client.execute("SELECT count(*) FROM pragma_table_info('accounts') WHERE name = 'nickname'")).rows[0]![0]).toBe(1);
  });

  it('the statements after a rebuild in the same migration still run under the rebuilt table’s triggers', async () => {
    // a data fix after the rebuild, in the same migration, must run under the trigger
    const client = await freshDatabase();
    await migrateDatabase(
      client,
      migrationsFolder([
        [
          'audit',
          [
            OWNER_CHANGES,
            'CREATE TRIGGER `accounts_owner_audit` AFTER UPDATE OF `owner` ON `accounts` BEGIN INSERT INTO `owner_changes` VALUES (NEW.`id`, NEW.`owner`); END;',
          ],
        ],
      ]),
    );
    await insertAccount(client, 'acc-1', 'ann');
    const folder = migrationsFolder([
      [
        'audit',
        [
          OWNER_CHANGES,
          'CREATE TRIGGER `accounts_owner_audit` AFTER UPDATE OF `owner` ON `accounts` BEGIN INSERT INTO `owner_changes` VALUES (NEW.`id`, NEW.`owner`); END;',
        ],
      ],
      // the generated rebuild, then a hand-written data fix in the same file
      ['rebuild_and_fix', [...REBUILD_ACCOUNTS, "UPDATE `accounts` SET `owner` = 'Ann' WHERE `owner` = 'ann';"]],
    ]);

    await migrateDatabase(client, folder);

    expect(await triggerNames(client)).toContain('accounts_owner_audit');
    expect((await client.execute('SELECT account_id, owner FROM owner_changes')).rows.map((r) => [r[0], r[1]])).toEqual([['acc-1', 'Ann']]);
  });

  it('an INSTEAD OF trigger on a view that a migration re-creates (drizzle-kit: DROP VIEW, CREATE VIEW) is created again', async () => {
    // a view's DROP takes its INSTEAD OF triggers along, as a table's does
    const client = await freshDatabase();
    const view = [
      "CREATE VIEW `open_accounts` AS SELECT `id`, `owner` FROM `accounts` WHERE `status` = 'open';",
      "CREATE TRIGGER `open_accounts_insert` INSTEAD OF INSERT ON `open_accounts` BEGIN INSERT INTO `accounts` (`id`, `owner`, `balance_cents`, `status`, `version`, `opened_at`) VALUES (NEW.`id`, NEW.`owner`, 0, 'open', 1, 0); END;",
    ];
    const folder = migrationsFolder([
      ['view', view],
      // the view's definition changed: drizzle-kit drops it and creates it anew
      [
        'view_changed',
        ['DROP VIEW `open_accounts`;', "CREATE VIEW `open_accounts` AS SELECT `id`, `owner`, `balance_cents` FROM `accounts` WHERE `status` = 'open';"],
      ],
    ]);

    await migrateDatabase(client, folder);

    expect(await triggerNames(client)).toContain('open_accounts_insert');
  });
});
