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
      const triggers = await triggerKeeper(tx);
      for (const [i, stmt] of statements.entries()) {
        try {
          await tx.execute(stmt);
        } catch (error) {
          throw fail(`failed at statement ${i + 1}: ${error instanceof Error ? error.message : String(error)}`, error);
        }
        await triggers.after(stmt, fail);
      }
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

/** A statement that drops a trigger on purpose (leading comments aside). */
const DROPS_TRIGGER = /^(?:\s|--[^\n]*(?:\n|$)|\/\*[\s\S]*?\*\/)*DROP\s+TRIGGER\b/i;

const quoted = (name: string) => `"${name.replaceAll('"', '""')}"`;

/**
 * Triggers are not part of a drizzle schema: when drizzle-kit rebuilds a table (create `__new_x`, copy, drop `x`,
 * rename) or a view (drop, create), the DROP takes their triggers with it and nothing in the migration creates them
 * again. A trigger that guards data (an edit unmarking a validated outbox row, a counter the relay's floor relies on)
 * would then be gone without a word. So, after each statement of a migration, a trigger that vanished is created
 * again, as it was, as soon as its table or view exists again (right after the rename, so later statements of the
 * same migration run under it), unless the statement was a DROP TRIGGER. A trigger that cannot run on the new table
 * (its body names a column the rebuild removed) fails the migration: SQLite checks a trigger's body only when it
 * compiles a statement that fires it, so each one created again is fired that way at once, on no row.
 */
async function triggerKeeper(tx: Transaction) {
  let known = await triggersOf(tx);
  const vanished = new Map<string, Trigger>();
  return {
    async after(stmt: string, fail: (detail: string, cause?: unknown) => MigrationError): Promise<void> {
      const now = await triggersOf(tx);
      const onPurpose = DROPS_TRIGGER.test(stmt);
      for (const [name, trigger] of known) if (!now.has(name) && !onPurpose) vanished.set(name, trigger);
      for (const name of now.keys()) vanished.delete(name);
      known = now;
      if (vanished.size === 0) return;
      const objects = new Set((await tx.execute("SELECT lower(name) FROM sqlite_master WHERE type IN ('table', 'view')")).rows.map((r) => String(r[0])));
      for (const trigger of [...vanished.values()]) {
        if (!objects.has(trigger.table.toLowerCase())) continue;
        try {
          await tx.execute(trigger.sql);
          await compileFiring(tx, trigger);
        } catch (error) {
          throw fail(
            `dropped trigger ${trigger.name} with ${trigger.table} (a rebuild), and it does not fit the new ${trigger.table}: ${error instanceof Error ? error.message : String(error)}; drop or recreate it in the migration`,
            error,
          );
        }
        vanished.delete(trigger.name);
        known.set(trigger.name, trigger);
      }
    },
  };
}

/** Runs, on no row at all (`WHERE 0`), the statement kind that fires `trigger`, every column named: it compiles the trigger. */
async function compileFiring(tx: Transaction, trigger: Trigger): Promise<void> {
  const afterName = trigger.sql.slice(Math.max(0, trigger.sql.indexOf(trigger.name) + trigger.name.length));
  const event = /\b(DELETE|INSERT|UPDATE)\b/i.exec(afterName)?.[1]?.toUpperCase();
  const target = quoted(trigger.table);
  const rs = await tx.execute({ sql: 'SELECT name FROM pragma_table_xinfo(?) WHERE hidden = 0', args: [trigger.table] });
  const columns = rs.rows.map((r) => quoted(String(r[0])));
  if (columns.length === 0) return;
  if (event === 'DELETE') await tx.execute(`DELETE FROM ${target} WHERE 0`);
  else if (event === 'INSERT') await tx.execute(`INSERT INTO ${target} (${columns.join(', ')}) SELECT ${columns.join(', ')} FROM ${target} WHERE 0`);
  else if (event === 'UPDATE') await tx.execute(`UPDATE ${target} SET ${columns.map((c) => `${c} = ${c}`).join(', ')} WHERE 0`);
}

/** `table row N → parent`, for the first row PRAGMA foreign_key_check reports, or undefined when there is none. */
async function firstForeignKeyViolation(tx: Transaction): Promise<string | undefined> {
  const rs = await tx.execute('PRAGMA foreign_key_check');
  const row = rs.rows[0];
  if (!row) return undefined;
  return `${String(row[0])} row ${String(row[1])} → ${String(row[2])}${rs.rows.length > 1 ? `, and ${rs.rows.length - 1} more` : ''}`;
}
