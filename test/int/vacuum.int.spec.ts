// Freed pages go back to the filesystem: new databases are created with auto_vacuum = INCREMENTAL and compaction
// vacuums what it freed; a database created before that keeps auto_vacuum NONE until `db:vacuum` converts it.
import { createClient, type Client } from '@libsql/client';
import { cpSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { registryOf } from '../../src/compose/define-modules.ts';
import { migrateDatabase } from '../../src/db/migrate.ts';
import { createDatabase, prepareLocalDatabase, sqlOf } from '../../src/db/open-database.ts';
import { createDeps } from '../../src/deps.ts';
import { compactInbox } from '../../src/inbox/retention.ts';
import { silentLogger } from '../../src/logger.ts';
import { compactOutbox } from '../../src/outbox/compact-outbox.ts';
import { convertToIncrementalVacuum, readVacuumState } from '../../src/ops/vacuum.ts';
import { createSubscriberDb } from '../support/consumer.ts';
import { countRows, createTempDir, createTestDb } from '../support/db.ts';
import { FIXTURE_MIGRATIONS, fixtureModules } from '../support/fixture/modules.ts';

const NOW = Date.parse('2026-06-01T00:00:00.000Z');
const DAY = 86_400_000;
const ROWS = 20_000;

const pragma = async (client: Pick<Client, 'execute'>, name: string) => Number((await client.execute(`PRAGMA ${name}`)).rows[0]![0]);

/** `n` sent outbox rows with a ~500-byte payload, sent two days before NOW, in one statement (columns every schema version has). */
async function insertSentRows(client: Client, n: number, prefix = 'old'): Promise<void> {
  await client.execute({
    sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, occurred_at, available_at, sent_at)
          WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
          SELECT ? || '-' || i, 'account', ? || '-' || i, 'account.opened.v1', json_object('pad', hex(randomblob(240))), 'sent', ?, ?, ? FROM n`,
    args: [n, prefix, prefix, NOW - 2 * DAY, NOW - 2 * DAY, NOW - 2 * DAY],
  });
}

/** A migrations folder holding only the first `count` migrations of the fixture's: the schema of an older release. */
function olderMigrations(dir: string, count: number): string {
  const folder = join(dir, 'migrations-old');
  cpSync(FIXTURE_MIGRATIONS.service, folder, { recursive: true });
  const journalPath = join(folder, 'meta', '_journal.json');
  const journal = JSON.parse(readFileSync(journalPath, 'utf8')) as { entries: unknown[] };
  journal.entries = journal.entries.slice(0, count);
  writeFileSync(journalPath, JSON.stringify(journal, null, 2));
  return folder;
}

/** Opens `url` the way the service does (prepareLocalDatabase, then the migrations) with Deps over the fixture. */
async function openLikeTheService(url: string) {
  const client = createClient({ url, timeout: 5000 });
  await prepareLocalDatabase(client);
  await migrateDatabase(client, FIXTURE_MIGRATIONS.service);
  const deps = createDeps(createDatabase(client), silentLogger, registryOf(fixtureModules), { clock: () => new Date(NOW) });
  return { client, deps };
}

describe('vacuum - new databases', () => {
  it('a new service database and a new subscriber database are created with auto_vacuum = INCREMENTAL', async () => {
    await using t = await createTestDb();
    expect(await pragma(t.client, 'auto_vacuum')).toBe(2);
    expect(String((await t.client.execute('PRAGMA journal_mode')).rows[0]![0])).toBe('wal');
    await using sdb = await createSubscriberDb();
    expect(await pragma(sdb.client, 'auto_vacuum')).toBe(2);
  });

  it('a file that got WAL but no table yet (an earlier start that never migrated) becomes incremental too', async () => {
    using tmp = createTempDir('hono-vacuum-');
    const url = `file:${join(tmp.dir, 'app.db')}`;
    const early = createClient({ url });
    await early.executeMultiple('PRAGMA journal_mode = WAL'); // what prepareLocalDatabase used to do: writes the header
    expect(await pragma(early, 'page_count')).toBe(1);
    early.close();
    const { client } = await openLikeTheService(url);
    expect(await pragma(client, 'auto_vacuum')).toBe(2);
    client.close();
  });

  it('after compacting many sent rows the file shrinks back: pages freed, freelist empty, page count near the empty schema', async () => {
    await using t = await createTestDb();
    const empty = await pragma(t.client, 'page_count');
    await insertSentRows(t.client, ROWS);
    const full = await pragma(t.client, 'page_count');
    expect(full).toBeGreaterThan(empty + 2000); // ~20k rows of ~550 bytes

    const batches: number[] = [];
    const result = await compactOutbox(t.deps, { cutoffMs: NOW - DAY, batch: 2000, onBatch: (p) => batches.push(p.deleted) });
    expect(result.deleted).toBe(ROWS);
    expect(result.batches).toBe(10);
    expect(result.pagesFreed).toBeGreaterThan(2000);
    expect(await pragma(t.client, 'freelist_count')).toBeLessThan(10);
    const after = await pragma(t.client, 'page_count');
    expect(after).toBe(full - result.pagesFreed!);
    expect(after).toBeLessThan(empty + 50);
    expect(await countRows(t.client, 'outbox')).toBe(0);

    // the main file itself shrinks once the WAL is checkpointed
    await t.client.execute('PRAGMA wal_checkpoint(TRUNCATE)');
    expect(statSync(join(t.dir, 'app.db')).size).toBe(after * (await pragma(t.client, 'page_size')));
  });

  it('each vacuum step frees at most what one batch freed, so no step holds the write lock much longer than a batch', async () => {
    await using t = await createTestDb();
    await insertSentRows(t.client, ROWS);
    const { writer } = t.deps;
    // what each write transaction of the compaction did to the file: pages added to the freelist, pages cut off the end
    const jobs: Array<{ freed: number; unfreed: number; shrunk: number }> = [];
    const watched: typeof writer = {
      ...writer,
      write: (fn) =>
        writer.write(async (tx) => {
          const run = sqlOf(tx);
          const read = async () => [await pragma(run, 'freelist_count'), await pragma(run, 'page_count')] as const;
          const [free0, pages0] = await read();
          const out = await fn(tx);
          const [free1, pages1] = await read();
          jobs.push({ freed: Math.max(0, free1 - free0), unfreed: Math.max(0, free0 - free1), shrunk: pages0 - pages1 });
          return out;
        }),
    };
    const result = await compactOutbox({ writer: watched, clock: t.deps.clock }, { cutoffMs: NOW - DAY, batch: 2000 });
    const batches = jobs.filter((j) => j.shrunk === 0 && j.freed > 0);
    const steps = jobs.filter((j) => j.shrunk > 0);
    expect(batches).toHaveLength(10);
    expect(steps.length).toBeGreaterThanOrEqual(10);
    const mostByABatch = Math.max(...batches.map((j) => j.freed));
    // a step takes at most that many pages off the freelist (the file also loses the pointer-map pages among them)
    for (const s of steps) expect(s.unfreed).toBeLessThanOrEqual(mostByABatch);
    for (const s of steps) expect(s.shrunk).toBeLessThanOrEqual(mostByABatch * 1.01 + 1);
    expect(steps.reduce((sum, s) => sum + s.shrunk, 0)).toBe(result.pagesFreed);
  });

  it('inbox retention vacuums the pages it freed as well', async () => {
    await using sdb = await createSubscriberDb();
    await sdb.client.execute({
      sql: `INSERT INTO inbox (event_id, consumer, message_type, received_at)
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
            SELECT 'evt-' || i || '-' || hex(randomblob(100)), 'audit', 'account.opened.v1', ? FROM n`,
      args: [ROWS, NOW - 40 * DAY],
    });
    const full = await pragma(sdb.client, 'page_count');
    const result = await compactInbox({ writer: sdb.writer, clock: () => new Date(NOW) }, { olderThanMs: 30 * DAY, batch: 5000 });
    expect(result.deleted).toBe(ROWS);
    expect(result.pagesFreed).toBeGreaterThan(500);
    expect(await pragma(sdb.client, 'freelist_count')).toBeLessThan(10);
    expect(await pragma(sdb.client, 'page_count')).toBe(full - result.pagesFreed!);
  });
});

describe('vacuum - databases created before (auto_vacuum NONE)', () => {
  /** A populated database of an older release: created without the PRAGMA, migrated with the first four migrations only. */
  async function legacyDatabase(dir: string): Promise<string> {
    const url = `file:${join(dir, 'app.db')}`;
    const old = createClient({ url });
    await old.executeMultiple('PRAGMA journal_mode = WAL');
    await migrateDatabase(old, olderMigrations(dir, 4));
    await insertSentRows(old, ROWS);
    await old.execute(
      `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, occurred_at, available_at) VALUES ('still-pending', 'account', 'p', 'account.opened.v1', '{}', 'pending', ${NOW}, ${NOW})`,
    );
    expect(await pragma(old, 'auto_vacuum')).toBe(0);
    old.close();
    return url;
  }

  it('still migrates and compacts, and is left NONE (the freed pages stay in the file) until db:vacuum converts it, keeping every row', async () => {
    using tmp = createTempDir('hono-vacuum-legacy-');
    const url = await legacyDatabase(tmp.dir);
    const { client, deps } = await openLikeTheService(url);
    try {
      expect(await pragma(client, 'auto_vacuum')).toBe(0);
      // the later migrations ran: the partition columns exist
      expect((await client.execute("SELECT count(*) FROM pragma_table_info('outbox') WHERE name IN ('aggregate_hash', 'partition')")).rows[0]![0]).toBe(2);
      await insertSentRows(client, 500, 'recent');
      await client.execute({ sql: "UPDATE outbox SET sent_at = ? WHERE id LIKE 'recent-%'", args: [NOW] });

      const full = await pragma(client, 'page_count');
      const result = await compactOutbox(deps, { cutoffMs: NOW - DAY, batch: 5000 });
      expect(result).toEqual({ deleted: ROWS, batches: 4 }); // no pagesFreed: nothing went back to the filesystem
      expect(await pragma(client, 'page_count')).toBe(full);
      const free = await pragma(client, 'freelist_count');
      expect(free).toBeGreaterThan(2000);
      expect(await pragma(client, 'auto_vacuum')).toBe(0);

      const ids = async () => (await client.execute('SELECT id, status, payload FROM outbox ORDER BY seq')).rows.map((r) => [r.id, r.status, r.payload]);
      const kept = await ids();
      expect(kept).toHaveLength(501);
      const report = await convertToIncrementalVacuum(client);
      expect(report.converted).toBe(true);
      expect(report.before).toMatchObject({ autoVacuum: 'none', pageCount: full, freelistCount: free });
      expect(report.after).toMatchObject({ autoVacuum: 'incremental', freelistCount: 0 });
      expect(report.after.pageCount).toBeLessThan(full - 2000);
      expect(await pragma(client, 'auto_vacuum')).toBe(2);
      expect(await ids()).toEqual(kept);
      expect(String((await client.execute('PRAGMA integrity_check')).rows[0]![0])).toBe('ok');

      // from now on compaction gives the pages back, and a second conversion is a no-op
      const second = await compactOutbox(deps, { cutoffMs: NOW + 1, batch: 100 });
      expect(second.deleted).toBe(500);
      expect(second.pagesFreed).toBeGreaterThan(0);
      expect(await pragma(client, 'freelist_count')).toBeLessThan(5);
      expect((await convertToIncrementalVacuum(client)).converted).toBe(false);
      expect(await readVacuumState(client)).toMatchObject({ autoVacuum: 'incremental' });
    } finally {
      client.close();
    }
  });
});
