import type { Client } from '@libsql/client';
import { readMigrationFiles } from 'drizzle-orm/migrator';

const TABLE = '__drizzle_migrations';

/**
 * Applies the drizzle-kit migrations in `folder` that the database has not seen, inside one write transaction,
 * so several processes starting at once against one file apply each migration exactly once.
 * Call before the Writer is in use (it opens its own BEGIN IMMEDIATE). Returns how many were applied.
 */
export async function migrateDatabase(client: Client, folder: string): Promise<number> {
  const migrations = readMigrationFiles({ migrationsFolder: folder });
  const tx = await client.transaction('write');
  try {
    await tx.execute(
      `CREATE TABLE IF NOT EXISTS ${TABLE} (id INTEGER PRIMARY KEY, hash TEXT NOT NULL, created_at NUMERIC)`,
    );
    const last = await tx.execute(`SELECT created_at FROM ${TABLE} ORDER BY created_at DESC LIMIT 1`);
    const lastAt = last.rows[0] ? Number(last.rows[0][0]) : -1;
    let applied = 0;
    for (const m of migrations) {
      if (m.folderMillis <= lastAt) continue;
      for (const stmt of m.sql) if (stmt.trim()) await tx.execute(stmt);
      await tx.execute({ sql: `INSERT INTO ${TABLE} (hash, created_at) VALUES (?, ?)`, args: [m.hash, m.folderMillis] });
      applied++;
    }
    await tx.commit();
    return applied;
  } finally {
    tx.close();
  }
}
