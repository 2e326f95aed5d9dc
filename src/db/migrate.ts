import type { Client, Transaction } from '@libsql/client';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import { beginWrite, dropPoisonedConnections } from './write-lock.ts';

const TABLE = '__drizzle_migrations';

/** A migration could not be applied; nothing of it (nor of the ones after it) was. Names it by its place in the journal. */
export class MigrationError extends Error {
  override readonly name = 'MigrationError';
  constructor(
    /** The migrations folder. */
    readonly folder: string,
    /** Its position in `meta/_journal.json` (0-based), the entry whose `tag` names its file. */
    readonly index: number,
    /** Its `when` in the journal. */
    readonly when: number,
    /** What went wrong, e.g. `failed at statement 2: SQLITE_ERROR: …`. */
    readonly detail: string,
    cause?: unknown,
  ) {
    super(`Migration #${index + 1} of ${folder} (journal entry ${index}, created ${new Date(when).toISOString()}) ${detail}`, { cause });
  }
}

/**
 * Applies the drizzle-kit migrations in `folder` that the database has not seen, inside one write transaction,
 * so several processes starting at once against one file apply each migration exactly once.
 * Call before the Writer or anything else uses the client (it opens its own BEGIN IMMEDIATE, waiting out another
 * process's lock for the client's busy budget). Returns how many were applied; throws MigrationError, with
 * everything rolled back, when a statement fails or a migration leaves rows that violate a foreign key.
 */
export async function migrateDatabase(client: Client, folder: string): Promise<number> {
  const migrations = readMigrationFiles({ migrationsFolder: folder });
  // drizzle-kit rebuilds a table (create __new_x, copy, drop x, rename) between PRAGMA foreign_keys=OFF and ON, which
  // are no-ops inside a transaction, and libSQL turns foreign keys on: dropping a referenced table would fail. So
  // they go off on the connection before BEGIN, PRAGMA foreign_key_check stands in for them, and they come back on.
  const localFile = client.protocol === 'file';
  const tx = await beginWrite(client, localFile ? { setup: 'PRAGMA foreign_keys = OFF' } : {});
  try {
    const keysOff = Number((await tx.execute('PRAGMA foreign_keys')).rows[0]?.[0]) === 0;
    await tx.execute(`CREATE TABLE IF NOT EXISTS ${TABLE} (id INTEGER PRIMARY KEY, hash TEXT NOT NULL, created_at NUMERIC)`);
    const last = await tx.execute(`SELECT created_at FROM ${TABLE} ORDER BY created_at DESC LIMIT 1`);
    const lastAt = last.rows[0] ? Number(last.rows[0][0]) : -1;
    let applied = 0;
    for (const [index, m] of migrations.entries()) {
      if (m.folderMillis <= lastAt) continue;
      const fail = (detail: string, cause?: unknown) => new MigrationError(folder, index, m.folderMillis, detail, cause);
      const statements = m.sql.filter((s) => s.trim());
      const triggersBefore = await triggersOf(tx);
      for (const [i, stmt] of statements.entries()) {
        try {
          await tx.execute(stmt);
        } catch (error) {
          throw fail(`failed at statement ${i + 1}: ${error instanceof Error ? error.message : String(error)}`, error);
        }
      }
      await restoreDroppedTriggers(tx, triggersBefore, statements, fail);
      if (keysOff) {
        const violation = await firstForeignKeyViolation(tx);
        if (violation) throw fail(`leaves rows that violate a foreign key (first: ${violation})`);
      }
      await tx.execute({ sql: `INSERT INTO ${TABLE} (hash, created_at) VALUES (?, ?)`, args: [m.hash, m.folderMillis] });
      applied++;
    }
    await tx.commit();
    return applied;
  } finally {
    tx.close();
    if (localFile) await restoreForeignKeys(client);
  }
}

/**
 * The transaction's connection went back to the pool last, so it is the one the pool hands out next and this
 * lands on. Should that fail, closing the pool is the sure way not to keep a connection without foreign keys.
 */
async function restoreForeignKeys(client: Client): Promise<void> {
  try {
    await client.executeMultiple('PRAGMA foreign_keys = ON');
  } catch {
    dropPoisonedConnections(client);
  }
}

type Trigger = { name: string; table: string; sql: string };

/** The database's triggers, by name. */
async function triggersOf(tx: Transaction): Promise<Map<string, Trigger>> {
  const rs = await tx.execute("SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger' AND sql IS NOT NULL");
  return new Map(rs.rows.map((r) => [String(r[0]), { name: String(r[0]), table: String(r[1]), sql: String(r[2]) }]));
}

/** `DROP TRIGGER [IF EXISTS] [schema.]name`, quoted or not; the name is the last group. */
const DROP_TRIGGER = /\bDROP\s+TRIGGER\s+(?:IF\s+EXISTS\s+)?(?:["`[]?\w+["`\]]?\.)?["`[]?(\w+)/gi;

/** The triggers `statements` drop by name (lower case), comments aside. */
function droppedByName(statements: string[]): Set<string> {
  const text = statements
    .join('\n')
    .replace(/--[^\n]*/g, '')
    .replace(/\/\*[\s\S]*?\*\//g, '');
  return new Set([...text.matchAll(DROP_TRIGGER)].map((m) => m[1]!.toLowerCase()));
}

/**
 * Triggers are not part of a drizzle schema: when drizzle-kit rebuilds a table (create `__new_x`, copy, drop `x`,
 * rename), the DROP takes the table's triggers with it and nothing in the migration creates them again. A trigger
 * that guards data (an edit unmarking a validated outbox row, a counter the relay's floor relies on) would then be
 * gone without a word. So each trigger that a migration's statements did not drop by name is created again, as it
 * was, once its table is back (a migration that means to drop one says DROP TRIGGER); one SQLite refuses to create
 * on the new table fails the migration.
 */
async function restoreDroppedTriggers(
  tx: Transaction,
  before: Map<string, Trigger>,
  statements: string[],
  fail: (detail: string, cause?: unknown) => MigrationError,
): Promise<void> {
  const after = await triggersOf(tx);
  const dropped = droppedByName(statements);
  const tables = new Set((await tx.execute("SELECT lower(name) FROM sqlite_master WHERE type = 'table'")).rows.map((r) => String(r[0])));
  for (const trigger of before.values()) {
    if (after.has(trigger.name) || dropped.has(trigger.name.toLowerCase()) || !tables.has(trigger.table.toLowerCase())) continue;
    try {
      await tx.execute(trigger.sql);
    } catch (error) {
      throw fail(
        `dropped trigger ${trigger.name} with its table ${trigger.table} (a table rebuild), and it cannot be created again: ${error instanceof Error ? error.message : String(error)}; drop or recreate it in the migration`,
        error,
      );
    }
  }
}

/** `table row N → parent`, for the first row PRAGMA foreign_key_check reports, or undefined when there is none. */
async function firstForeignKeyViolation(tx: Transaction): Promise<string | undefined> {
  const rs = await tx.execute('PRAGMA foreign_key_check');
  const row = rs.rows[0];
  if (!row) return undefined;
  return `${String(row[0])} row ${String(row[1])} → ${String(row[2])}${rs.rows.length > 1 ? `, and ${rs.rows.length - 1} more` : ''}`;
}
