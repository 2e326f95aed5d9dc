import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { FIXTURE_MIGRATIONS } from './fixture/modules.ts';

export type Journal = { version: string; dialect: string; entries: Array<{ idx: number; version: string; when: number; tag: string; breakpoints: boolean }> };

/**
 * A migrations folder in `dir`: the fixture's service migrations followed by `extra` (name → SQL, statements
 * separated by drizzle-kit breakpoints), in order, each with a journal entry as drizzle-kit writes it.
 */
export function migrationsFolder(dir: string, extra: ReadonlyArray<readonly [name: string, sql: string]>): { folder: string; tags: string[] } {
  const folder = join(dir, 'migrations');
  cpSync(FIXTURE_MIGRATIONS.service, folder, { recursive: true });
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

/** Statements joined with drizzle-kit's breakpoint, as one migration's SQL. */
export const statements = (...sql: string[]): string => sql.join('--> statement-breakpoint\n');
