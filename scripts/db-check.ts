// `npm run db:check [-- <service|subscriber name>] [--from <database file>]`: applies the pending migrations of one
// database to a COPY of a populated database (by default the one DATABASE_URL or CONSUMER_DATABASE_URL_TEMPLATE
// names; better, a recent backup of production) and reports what each table kept. The source is never written.
// Exit 0: every pending migration applied and no table lost a row; 1: a migration failed or rows were lost;
// 2: a bad command line or no database to copy. Run it after `npm run db:generate`, before committing the migration.
import { createClient, type Client } from '@libsql/client';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import { migrateDatabase, MigrationError } from '../src/db/migrate.ts';
import { prepareLocalDatabase } from '../src/db/open-database.ts';
import { parseArgs, UsageError } from '../src/entry/args.ts';
import { APP_MIGRATIONS, loadConfigOrExit } from '../src/entry/boot.ts';
import { subscriberDatabaseUrl } from '../src/inbox/subscriber-database.ts';

const USAGE = 'usage: npm run db:check [-- <service|subscriber name>] [--from <database file>]';

type Journal = { entries: Array<{ when: number; tag: string }> };
type Table = { rows: number; columns: string[] };

/** The database to check: its migrations folder and the file to copy. Throws UsageError for a bad command line. */
function target(argv: string[]): { folder: string; source: string } {
  const { positional, values } = parseArgs(argv, { values: ['from'], positional: 1 });
  const name = positional[0] ?? 'service';
  const folder = name === 'service' ? APP_MIGRATIONS.service : APP_MIGRATIONS.subscriber(name);
  if (!existsSync(join(folder, 'meta', '_journal.json')))
    throw new UsageError(`no migrations for ${JSON.stringify(name)} (looked in ${relative(process.cwd(), folder)})`);
  const config = loadConfigOrExit();
  const url = values.from ?? (name === 'service' ? config.DATABASE_URL : subscriberDatabaseUrl(config.CONSUMER_DATABASE_URL_TEMPLATE, name));
  if (/^(libsql|https?|wss?):/.test(url)) throw new UsageError(`${url} is not a local file: copy the database to a file first and pass it with --from`);
  const source = url.replace(/^file:/, '').split('?')[0]!;
  if (!existsSync(source)) throw new UsageError(`no database at ${source}: pass --from with a copy of a populated database (a backup of production is best)`);
  return { folder, source };
}

async function tables(client: Client): Promise<Map<string, Table>> {
  const names = await client.execute(
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name != '__drizzle_migrations' ORDER BY name",
  );
  const out = new Map<string, Table>();
  for (const name of names.rows.map((r) => String(r[0]))) {
    const rows = Number((await client.execute(`SELECT count(*) FROM "${name}"`)).rows[0]![0]);
    const columns = (await client.execute(`PRAGMA table_info("${name}")`)).rows.map((c) => String(c.name));
    out.set(name, { rows, columns });
  }
  return out;
}

/**
 * The journal entries the copy has not applied yet (drizzle's rule: created after the last applied one), and a
 * warning when one it counts as applied is not recorded in the copy: the file was not made from this folder (a
 * subscriber's database checked against the service's migrations …) or that migration was edited after it ran.
 */
async function pendingTags(client: Client, folder: string): Promise<{ pending: string[]; warning?: string }> {
  const journal = JSON.parse(readFileSync(join(folder, 'meta', '_journal.json'), 'utf8')) as Journal;
  const known = await client.execute("SELECT count(*) FROM sqlite_master WHERE name = '__drizzle_migrations'");
  if (Number(known.rows[0]![0]) === 0) return { pending: journal.entries.map((e) => e.tag) };
  const recorded = new Set((await client.execute('SELECT hash FROM __drizzle_migrations')).rows.map((r) => String(r[0])));
  const last = Number((await client.execute('SELECT max(created_at) FROM __drizzle_migrations')).rows[0]![0] ?? -1);
  const files = readMigrationFiles({ migrationsFolder: folder });
  const pending = journal.entries.filter((e) => e.when > last).map((e) => e.tag);
  const stranger = journal.entries.find((e, i) => e.when <= last && !recorded.has(files[i]!.hash));
  if (!stranger) return { pending };
  return {
    pending,
    warning: `warning: ${stranger.tag}.sql is not recorded in this database as applied: is it a database of ${relative(process.cwd(), folder)}? Or was that file edited after it ran?`,
  };
}

/** The failed statement of a MigrationError, and the hint for the drizzle-kit rebuild that copies a column the old table lacks. */
function explain(error: MigrationError, folder: string): string[] {
  const tag = (JSON.parse(readFileSync(join(folder, 'meta', '_journal.json'), 'utf8')) as Journal).entries[error.index]?.tag;
  const file = tag ? join(folder, `${tag}.sql`) : folder;
  const lines = [`FAILED: migration ${relative(process.cwd(), file)} ${error.detail}`];
  const n = Number(/failed at statement (\d+)/.exec(error.detail)?.[1]);
  const statement =
    tag && n
      ? readFileSync(file, 'utf8')
          .split('--> statement-breakpoint')
          .filter((s) => s.trim())
          [n - 1]?.trim()
      : undefined;
  if (statement) lines.push(`  statement ${n}: ${statement.length > 400 ? `${statement.slice(0, 400)} …` : statement}`);
  if (statement && /^INSERT INTO `__new_/.test(statement) && /no such column/.test(error.detail)) {
    lines.push(
      '  drizzle-kit rebuilt this table and copies a column the old table does not have yet. Remove that column from',
      '  BOTH column lists of this INSERT … SELECT: the rebuilt table fills it with its default. Then run db:check again.',
      '  (README, "What to check in a generated migration".)',
    );
  }
  return lines;
}

/** The most frequent values of a column added by the migrations, e.g. `'web' ×120`. */
async function valuesOf(client: Client, table: string, column: string): Promise<string> {
  const rs = await client.execute(`SELECT quote("${column}"), count(*) FROM "${table}" GROUP BY 1 ORDER BY 2 DESC LIMIT 3`);
  return rs.rows.map((r) => `${String(r[0])} ×${String(r[1])}`).join(', ') || 'no rows';
}

async function check(folder: string, source: string): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'db-check-'));
  const copyPath = join(dir, 'copy.db');
  const from = createClient({ url: `file:${source}` });
  try {
    await from.execute({ sql: 'VACUUM INTO ?', args: [copyPath] }); // a consistent copy, even of a database in use
  } finally {
    from.close();
  }
  const copy = createClient({ url: `file:${copyPath}` });
  try {
    await prepareLocalDatabase(copy);
    const { pending, warning } = await pendingTags(copy, folder);
    console.log(`db:check: ${relative(process.cwd(), folder)} on a copy of ${source} (the source is not written)`);
    if (warning) console.error(warning);
    if (pending.length === 0) {
      console.log('nothing to check: every migration is already applied to this database');
      return 0;
    }
    console.log(`pending: ${pending.map((t) => `${t}.sql`).join(', ')}`);
    const before = await tables(copy);
    try {
      await migrateDatabase(copy, folder);
    } catch (error) {
      if (!(error instanceof MigrationError)) throw error;
      for (const line of explain(error, folder)) console.error(line);
      return 1;
    }
    const after = await tables(copy);
    const sql = pending.map((t) => readFileSync(join(folder, `${t}.sql`), 'utf8')).join('\n');
    let lost = 0;
    for (const name of new Set([...before.keys(), ...after.keys()])) {
      const b = before.get(name);
      const a = after.get(name);
      const notes: string[] = [];
      if (!a) notes.push('dropped');
      if (a && b && a.rows < b.rows) {
        lost++;
        notes.push(`LOST ${b.rows - a.rows} ROWS`);
      }
      if (b && b.rows === 0 && sql.includes(`\`${name}\``)) notes.push('empty: the check proves nothing about its rows');
      for (const column of a && b ? a.columns.filter((c) => !b.columns.includes(c)) : [])
        notes.push(`new column ${column}: ${await valuesOf(copy, name, column)}`);
      console.log(`  ${name.padEnd(28)} ${String(b?.rows ?? '-').padStart(9)} → ${String(a?.rows ?? '-').padEnd(9)} ${notes.join('; ')}`);
    }
    if (lost > 0) {
      console.error(`FAILED: ${lost} table(s) lost rows; if the migration deletes them on purpose, apply it knowing that`);
      return 1;
    }
    console.log(`OK: ${pending.length} migration(s) applied to the copy and no table lost a row`);
    return 0;
  } finally {
    copy.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

let chosen: { folder: string; source: string };
try {
  chosen = target(process.argv.slice(2));
} catch (error) {
  if (!(error instanceof UsageError)) throw error;
  console.error(`${error.message}\n${USAGE}`);
  process.exit(2);
}
process.exit(await check(chosen.folder, chosen.source));
