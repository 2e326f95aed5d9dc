// Hostile edges of the local-file client's statement cache (src/db/statement-cache.ts), over real libSQL files: a
// schema changed by another process that keeps a result's width, and the cost the cache was built to save.
import { createClient, type Client } from '@libsql/client';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createLocalClient } from '../../src/db/local-client.ts';
import { writeLockBusy } from '../../src/db/write-lock.ts';
import { createTempDir } from '../support/db.ts';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function freshUrl(): string {
  const tmp = createTempDir('statement-cache-');
  cleanups.push(() => tmp[Symbol.dispose]());
  return `file:${join(tmp.dir, 'cache.db')}`;
}

async function open(make: (url: string) => Client, url: string): Promise<Client> {
  const client = make(url);
  cleanups.push(() => client.close());
  await client.executeMultiple('PRAGMA journal_mode = WAL');
  return client;
}

describe('local client - cached statements name every value by its own column', () => {
  it('a cached SELECT * gives each value under its column after another process recreates the table with as many columns', async () => {
    const url = freshUrl();
    const c = await open((u) => createLocalClient({ url: u, timeout: 5 }), url);
    await c.execute('CREATE TABLE s (x TEXT, y TEXT)');
    await c.execute("INSERT INTO s VALUES ('x1', 'y1')");
    expect((await c.execute('SELECT * FROM s')).rows[0]).toEqual({ x: 'x1', y: 'y1' });
    // another process (a migration of a newer release, an operator) rebuilds the table: same width, other order
    const other = await open((u) => createClient({ url: u, timeout: 5 }), url);
    await other.executeMultiple("DROP TABLE s; CREATE TABLE s (y TEXT, x TEXT); INSERT INTO s (x, y) VALUES ('x2', 'y2')");
    const reference = await other.execute('SELECT * FROM s');
    const after = await c.execute('SELECT * FROM s');
    expect(reference.rows[0]).toEqual({ y: 'y2', x: 'x2' });
    expect(after.columns).toEqual(reference.columns);
    expect(after.rows[0]).toEqual({ y: 'y2', x: 'x2' });
  });
});

describe('local client - what the statement cache keeps across the write queue', () => {
  it("a cached SELECT keeps its columns and row shape across the writer's write-lock probe (no schema change)", async () => {
    const c = await open((u) => createLocalClient({ url: u, timeout: 5 }), freshUrl());
    await c.execute('CREATE TABLE t (v INTEGER)');
    await c.execute('INSERT INTO t VALUES (1)');
    const before = (await c.execute('SELECT v FROM t')).rows[0]!;
    // what the writer runs before every group commit (writer.ts drain → writeLockBusy: BEGIN IMMEDIATE; ROLLBACK)
    expect(await writeLockBusy(c)).toBeUndefined();
    const after = (await c.execute('SELECT v FROM t')).rows[0]!;
    // the same row class: the cached statement's columns were not read again and no class was built again
    expect(Object.getPrototypeOf(after)).toBe(Object.getPrototypeOf(before));
  });
});
