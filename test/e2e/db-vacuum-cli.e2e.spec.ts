// `npm run cli -- db:vacuum`: converts a database created before auto_vacuum = INCREMENTAL, keeping every row.
import type { Client } from '@libsql/client';
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { migrateDatabase } from '../../src/db/migrate.ts';
import { MIGRATIONS_FOLDER } from '../../src/entry/boot.ts';
import { useCliWorkspaces } from '../support/cli-workspace.ts';

const workspace = useCliWorkspaces();

const pragma = async (client: Client, name: string) => Number((await client.execute(`PRAGMA ${name}`)).rows[0]![0]);

describe('cli - db:vacuum', () => {
  it('converts a populated database created without auto_vacuum to INCREMENTAL, keeping every row; a second run does nothing', async () => {
    const w = workspace();
    // created the way releases before auto_vacuum did: WAL, then the migrations, no PRAGMA auto_vacuum
    const legacy = w.open(w.env.DATABASE_URL);
    await legacy.executeMultiple('PRAGMA journal_mode = WAL');
    await migrateDatabase(legacy, MIGRATIONS_FOLDER);
    await legacy.execute(`INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, occurred_at, available_at, sent_at)
      WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
      SELECT 'r-' || i, 'order', 'o-' || i, 'order.placed.v1', hex(randomblob(200)), CASE WHEN i <= 4000 THEN 'sent' ELSE 'pending' END, 0, 0, 1 FROM n`);
    await legacy.execute("DELETE FROM outbox WHERE status = 'sent'"); // freed pages stay in the file
    const rows = async () => (await legacy.execute('SELECT id, payload FROM outbox ORDER BY seq')).rows.map((r) => `${r.id}:${r.payload}`);
    const before = await rows();
    const pagesBefore = await pragma(legacy, 'page_count');
    expect(await pragma(legacy, 'auto_vacuum')).toBe(0);
    expect(await pragma(legacy, 'freelist_count')).toBeGreaterThan(100);

    // the service's own start leaves it NONE: no silent full VACUUM
    expect((await w.cli(['outbox:stats'])).code).toBe(0);
    expect(await pragma(w.open(w.env.DATABASE_URL), 'auto_vacuum')).toBe(0);
    expect(await pragma(legacy, 'page_count')).toBe(pagesBefore);

    const out = await w.cli(['db:vacuum']);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stdout).toMatch(/auto_vacuum none → incremental/);
    // a fresh connection: an open one answers PRAGMA auto_vacuum from what it read when it last opened the file
    const reopened = w.open(w.env.DATABASE_URL);
    expect(await pragma(reopened, 'auto_vacuum')).toBe(2);
    expect(await pragma(reopened, 'freelist_count')).toBe(0);
    expect(await pragma(reopened, 'page_count')).toBeLessThan(pagesBefore);
    expect(await rows()).toEqual(before);

    const again = await w.cli(['db:vacuum']);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('incremental already');
  });

  it("converts a subscriber's database with --consumer", async () => {
    const w = workspace();
    const url = w.env.CONSUMER_DATABASE_URL_TEMPLATE.replace('{name}', 'reporting');
    const legacy = w.open(url);
    await legacy.execute('CREATE TABLE kept (x TEXT)'); // a table before the PRAGMA: auto_vacuum NONE
    await legacy.execute("INSERT INTO kept VALUES ('a'), ('b')");
    const out = await w.cli(['db:vacuum', '--consumer', 'reporting']);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stdout).toMatch(/auto_vacuum none → incremental/);
    const reopened = w.open(url);
    expect(await pragma(reopened, 'auto_vacuum')).toBe(2);
    expect((await reopened.execute('SELECT x FROM kept ORDER BY x')).rows.map((r) => r.x)).toEqual(['a', 'b']);
  });

  it('bad arguments print the usage and exit 2 without creating a database', async () => {
    const w = workspace();
    for (const args of [
      ['db:vacuum', '--nope'],
      ['db:vacuum', 'app.db'],
      ['db:vacuum', '--consumer'],
      ['db:vacuum', '--consumer', 'nobody'],
      ['db:vacuum', '--consumer', 'reporting', '--consumer', 'reporting'],
      ['db:vacuum', '--full'],
    ]) {
      const res = await w.cli(args);
      expect(res.code, args.join(' ')).toBe(2);
      expect(res.stderr).toContain('usage: npm run cli');
      expect(res.stderr).toContain('db:vacuum [--consumer <name>]');
    }
    expect(existsSync(w.env.DATABASE_URL.slice('file:'.length))).toBe(false);
    expect(existsSync(w.env.CONSUMER_DATABASE_URL_TEMPLATE.replace('{name}', 'nobody').slice('file:'.length))).toBe(false);
  });

  it('refuses a remote database URL with exit 2', async () => {
    const w = workspace();
    const res = await w.cli(['db:vacuum'], { DATABASE_URL: 'http://127.0.0.1:1' });
    expect(res.code).toBe(2);
    expect(res.stderr).toContain('local database file only');
  });
});
