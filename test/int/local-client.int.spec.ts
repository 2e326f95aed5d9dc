// The local-file client (src/db/local-client.ts) must be indistinguishable from @libsql/client's own local client,
// which it replaces for `file:` URLs: the same ResultSets and errors for the same statements, the same transaction and
// pool behaviour, and, because it keeps prepared statements, still correct after schema changes and lock failures.
import { createClient, LibsqlBatchError, LibsqlError, type Client, type InStatement, type ResultSet, type Value } from '@libsql/client';
import { sql } from 'drizzle-orm';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { isBusyError } from '../../src/db/busy.ts';
import { createLocalClient } from '../../src/db/local-client.ts';
import { createDatabase } from '../../src/db/open-database.ts';
import { writeLockBusy } from '../../src/db/write-lock.ts';
import { createTempDir } from '../support/db.ts';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A fresh database file's URL in its own temp dir (removed after the test). */
function freshUrl(name = 'local.db'): string {
  const tmp = createTempDir('local-client-');
  cleanups.push(() => tmp[Symbol.dispose]());
  return `file:${join(tmp.dir, name)}`;
}

/** Opens `url` with `open` in WAL mode, closed after the test. */
async function opened(open: (url: string) => Client, url: string): Promise<Client> {
  const client = open(url);
  cleanups.push(() => client.close());
  await client.executeMultiple('PRAGMA journal_mode = WAL');
  return client;
}

const local = (url: string, concurrency?: number) => opened((u) => createLocalClient({ url: u, timeout: 5, ...(concurrency ? { concurrency } : {}) }), url);
const reference = (url: string) => opened((u) => createClient({ url: u, timeout: 5 }), url);

const plainValue = (v: Value) => (v instanceof ArrayBuffer ? { bytes: [...new Uint8Array(v)] } : v);

/** Everything a caller can read off a ResultSet, blobs as byte lists so they compare by content. */
function observed(rs: ResultSet) {
  return {
    columns: rs.columns,
    columnTypes: rs.columnTypes,
    rowsAffected: rs.rowsAffected,
    lastInsertRowid: rs.lastInsertRowid,
    rows: rs.rows.map((row) => ({
      length: row.length,
      byIndex: Array.from(row, plainValue),
      keys: Object.keys(row),
      byName: Object.fromEntries(Object.keys(row).map((k) => [k, plainValue(row[k]!)])),
      json: JSON.stringify(row),
    })),
    json: JSON.stringify(rs),
  };
}

/** What running `stmt` produced: its observed ResultSet, or its error's class, message and codes. */
async function outcome(client: Client, stmt: InStatement) {
  try {
    return { ok: observed(await client.execute(stmt)) };
  } catch (error) {
    const e = error as LibsqlError;
    return { error: { name: e.constructor.name, message: e.message, code: e.code, extendedCode: e.extendedCode, rawCode: e.rawCode } };
  }
}

const SCHEMA = ['CREATE TABLE t (id INTEGER PRIMARY KEY, i INTEGER, r REAL, s TEXT, b BLOB, n NUMERIC, u TEXT UNIQUE)', 'CREATE TABLE plain (a, b)'];

const STATEMENTS: InStatement[] = [
  { sql: 'INSERT INTO t (i, r, s, b, n, u) VALUES (?, ?, ?, ?, ?, ?)', args: [1, 1.5, 'one', new Uint8Array([1, 2, 3]), 10, 'u1'] },
  { sql: 'INSERT INTO t (i, r, s, b, n, u) VALUES (?, ?, ?, ?, ?, ?)', args: [2n, -0.25, '', new Uint8Array([]).buffer, null, 'u2'] },
  {
    sql: 'INSERT INTO t (i, r, s, b, n, u) VALUES (:i, @r, $s, :b, :n, :u)',
    args: { ':i': true, '@r': 3, $s: 'named', b: new Uint8Array([255]), n: '7', u: 'u3' },
  },
  { sql: 'INSERT INTO t (i, s, u) VALUES (?, ?, ?)', args: [9007199254740991, new Date(Date.UTC(2026, 0, 2)) as unknown as string, 'u4'] },
  { sql: 'INSERT INTO t (i, s, u) VALUES (?, ?, ?)', args: [9007199254740993n, 'too big for a number', 'u5'] },
  { sql: 'INSERT INTO plain VALUES (?, ?)', args: [1, 'x'] },
  { sql: 'INSERT INTO plain VALUES (?, ?)', args: [null, null] },
  'SELECT * FROM t WHERE i < 9007199254740991 ORDER BY id',
  'SELECT id, i, s FROM t WHERE id = 4',
  'SELECT i FROM t WHERE id = 5',
  'SELECT CAST(i AS TEXT) AS i FROM t WHERE id = 5',
  'SELECT -9007199254740991 AS smallest, 9007199254740991 AS largest',
  'SELECT * FROM plain',
  'SELECT a, b, a AS b, 1 AS length, 2 AS "0", 3 AS "__proto__", 4 AS "constructor" FROM plain',
  'SELECT 1, 2',
  'SELECT 1',
  'SELECT count(*), sum(i), avg(r), group_concat(s) FROM t',
  'SELECT * FROM t WHERE 0',
  { sql: 'SELECT ? AS a, ? AS b, ? AS c', args: [1, 'two', null] },
  { sql: 'UPDATE t SET s = upper(s) WHERE id <= ?', args: [2] },
  { sql: 'UPDATE t SET r = r + 1 WHERE id = ? RETURNING id, r', args: [1] },
  { sql: 'INSERT INTO plain VALUES (?, ?) RETURNING rowid, *', args: [3, 'y'] },
  { sql: 'DELETE FROM plain WHERE a IS NULL', args: [] },
  { sql: 'INSERT INTO t (u) VALUES (?)', args: ['u1'] },
  { sql: 'INSERT INTO t (id, u) VALUES (?, ?)', args: [1, 'fresh'] },
  { sql: 'INSERT INTO t (u) VALUES (?)', args: [undefined as unknown as string] },
  { sql: 'INSERT INTO t (r) VALUES (?)', args: [Number.NaN] },
  'SELECT nope FROM t',
  'SELEKT 1',
  'SELECT 1 AS a; SELECT 2 AS b',
  'PRAGMA foreign_keys',
  'PRAGMA user_version = 3',
  'PRAGMA user_version',
];

describe('local client - results equal @libsql/client for the same statements', () => {
  it('gives the same columns, types, values, row shapes, rowsAffected, lastInsertRowid and errors, twice in a row (prepared, then cached)', async () => {
    const mine = await local(freshUrl());
    const theirs = await reference(freshUrl());
    for (const c of [mine, theirs]) for (const s of SCHEMA) await c.execute(s);
    for (const round of [1, 2]) {
      for (const stmt of STATEMENTS) {
        const [a, b] = [await outcome(mine, stmt), await outcome(theirs, stmt)];
        expect({ round, stmt, ...a }).toEqual({ round, stmt, ...b });
      }
    }
  });

  it('rejects an integer beyond 2^53 with the same RangeError in intMode number, and returns it in intMode bigint and string', async () => {
    const url = freshUrl();
    const mine = await local(url);
    await mine.execute('CREATE TABLE big (v INTEGER)');
    await mine.execute({ sql: 'INSERT INTO big VALUES (?)', args: [9007199254740993n] });
    const theirs = await reference(url);
    const failure = (c: Client) =>
      c.execute('SELECT v FROM big').then(
        () => 'resolved',
        (e: Error) => `${e.constructor.name}: ${e.message}`,
      );
    expect(await failure(mine)).toBe('RangeError: Received integer which cannot be safely represented as a JavaScript number');
    expect(await failure(mine)).toBe(await failure(theirs));
    // the failed conversion left nothing running: a write on the same connection commits
    await mine.execute({ sql: 'INSERT INTO big VALUES (?)', args: [1] });
    expect((await theirs.execute('SELECT count(*) AS n FROM big')).rows[0]!.n).toBe(2);
    const asBigint = createLocalClient({ url, intMode: 'bigint' });
    const asString = createLocalClient({ url, intMode: 'string' });
    cleanups.push(
      () => asBigint.close(),
      () => asString.close(),
    );
    expect((await asBigint.execute('SELECT v FROM big ORDER BY rowid')).rows.map((r) => r.v)).toEqual([9007199254740993n, 1n]);
    expect((await asString.execute('SELECT v FROM big ORDER BY rowid')).rows.map((r) => r.v)).toEqual(['9007199254740993', '1']);
    expect((await asBigint.execute({ sql: 'SELECT ? AS t', args: [true] })).rows[0]!.t).toBe(1n);
  });

  it('gives rows that toEqual plain objects of their columns, as drizzle and the tests read them', async () => {
    const mine = await local(freshUrl());
    const rs = await mine.execute("SELECT 1 AS id, 'a' AS name, NULL AS note");
    expect(rs.rows[0]).toEqual({ id: 1, name: 'a', note: null });
    expect({ ...rs.rows[0] }).toEqual({ id: 1, name: 'a', note: null });
    expect(Array.prototype.slice.call(rs.rows[0])).toEqual([1, 'a', null]);
    const db = createDatabase(mine);
    const ref = createDatabase(await reference(freshUrl()));
    expect(await db.all(sql`SELECT 1 AS id, 'a' AS name`)).toEqual([{ id: 1, name: 'a' }]);
    expect(await db.get(sql`SELECT 2 AS id`)).toEqual({ id: 2 });
    const values = sql`SELECT 3 AS id, 'c' AS name`;
    expect(await db.values(values)).toEqual(await ref.values(values));
    expect((await db.values(values)).map((r) => Array.from(r as ArrayLike<unknown>))).toEqual([[3, 'c']]);
  });
});

describe('local client - cached statements after schema changes', () => {
  it('returns the new columns when a table gains a column through this client', async () => {
    const c = await local(freshUrl());
    await c.execute('CREATE TABLE s (x, y)');
    await c.execute("INSERT INTO s VALUES (1, 'a')");
    expect((await c.execute('SELECT * FROM s')).rows[0]).toEqual({ x: 1, y: 'a' });
    await c.execute("ALTER TABLE s ADD COLUMN z TEXT DEFAULT 'zz'");
    const after = await c.execute('SELECT * FROM s');
    expect(after.columns).toEqual(['x', 'y', 'z']);
    expect(after.columnTypes).toEqual(['', '', 'TEXT']);
    expect(after.rows[0]).toEqual({ x: 1, y: 'a', z: 'zz' });
  });

  it('returns the new table when another connection drops and recreates it, with other and fewer columns', async () => {
    const url = freshUrl();
    const c = await local(url);
    await c.execute('CREATE TABLE s (x INTEGER, y TEXT, z TEXT)');
    await c.execute("INSERT INTO s VALUES (1, 'a', 'b')");
    expect((await c.execute('SELECT * FROM s')).rows[0]).toEqual({ x: 1, y: 'a', z: 'b' });
    const other = await reference(url);
    await other.executeMultiple("DROP TABLE s; CREATE TABLE s (p TEXT, q REAL); INSERT INTO s VALUES ('p', 2.5)");
    const after = await c.execute('SELECT * FROM s');
    expect(after.columns).toEqual(['p', 'q']);
    expect(after.columnTypes).toEqual(['TEXT', 'REAL']);
    expect(after.rows[0]).toEqual({ p: 'p', q: 2.5 });
    expect(after.rows[0]!.length).toBe(2);
  });

  it("gives a cached join's a.* values under their new columns after another process rebuilds a with as many columns, also when no row comes back", async () => {
    const url = freshUrl();
    const c = await local(url);
    await c.executeMultiple(
      "CREATE TABLE a (id INTEGER PRIMARY KEY, x TEXT, y TEXT); CREATE TABLE b (a_id INTEGER, v TEXT); INSERT INTO a VALUES (1, 'x1', 'y1'); INSERT INTO b VALUES (1, 'v1')",
    );
    const join = (id: number) => ({ sql: 'SELECT a.*, b.v FROM a JOIN b ON b.a_id = a.id WHERE a.id = ?', args: [id] });
    expect((await c.execute(join(1))).rows[0]).toEqual({ id: 1, x: 'x1', y: 'y1', v: 'v1' });
    const other = await reference(url);
    await other.executeMultiple("DROP TABLE a; CREATE TABLE a (y TEXT, id INTEGER PRIMARY KEY, x TEXT); INSERT INTO a (id, x, y) VALUES (1, 'x2', 'y2')");
    // no row to count values by: only the statement's own columns tell the new order
    const empty = await outcome(c, join(2));
    expect(empty).toEqual(await outcome(other, join(2)));
    expect(empty.ok?.columns).toEqual(['y', 'id', 'x', 'v']);
    expect(await outcome(c, join(1))).toEqual(await outcome(other, join(1)));
    expect((await c.execute(join(1))).rows[0]).toEqual({ y: 'y2', id: 1, x: 'x2', v: 'v1' });
  });

  it('runs a cached INSERT against the recreated table, and fails it with the same error once its column is gone', async () => {
    const url = freshUrl();
    const c = await local(url);
    await c.execute('CREATE TABLE s (x INTEGER)');
    const insert = { sql: 'INSERT INTO s (x) VALUES (?)', args: [1] };
    await c.execute(insert);
    const other = await reference(url);
    await other.executeMultiple('DROP TABLE s; CREATE TABLE s (w TEXT, x INTEGER)');
    expect((await c.execute(insert)).rowsAffected).toBe(1);
    await other.executeMultiple('DROP TABLE s; CREATE TABLE s (w TEXT)');
    await expect(c.execute(insert)).rejects.toMatchObject({ code: 'SQLITE_ERROR', message: expect.stringMatching(/no column named x/) });
    expect(await outcome(c, insert)).toEqual(await outcome(other, insert));
  });
});

describe('local client - transactions and batches', () => {
  it('rolls back a transaction that is closed without commit, and hands its connection back', async () => {
    const c = await local(freshUrl(), 1);
    await c.execute('CREATE TABLE t (v)');
    const tx = await c.transaction('write');
    await tx.execute({ sql: 'INSERT INTO t VALUES (?)', args: [1] });
    expect(tx.closed).toBe(false);
    tx.close();
    expect(tx.closed).toBe(true);
    await expect(tx.execute('SELECT 1')).rejects.toMatchObject({ code: 'TRANSACTION_CLOSED' });
    expect((await c.execute('SELECT count(*) AS n FROM t')).rows[0]!.n).toBe(0);
  });

  it('commits a transaction: its batch, executeMultiple and statements land together', async () => {
    const url = freshUrl();
    const c = await local(url);
    await c.execute('CREATE TABLE t (v)');
    const tx = await c.transaction('write');
    await tx.batch([{ sql: 'INSERT INTO t VALUES (?)', args: [1] }, 'INSERT INTO t VALUES (2)']);
    await tx.executeMultiple('INSERT INTO t VALUES (3); INSERT INTO t VALUES (4)');
    await tx.execute({ sql: 'INSERT INTO t VALUES (?)', args: [5] });
    expect((await (await reference(url)).execute('SELECT count(*) AS n FROM t')).rows[0]!.n).toBe(0);
    await tx.commit();
    expect(tx.closed).toBe(true);
    expect((await (await reference(url)).execute('SELECT count(*) AS n FROM t')).rows[0]!.n).toBe(5);
  });

  it('applies a batch all or nothing: a failing statement rolls back the ones before it and names its index', async () => {
    const c = await local(freshUrl());
    await c.execute('CREATE TABLE t (v UNIQUE)');
    const failed = await c
      .batch(['INSERT INTO t VALUES (1)', { sql: 'INSERT INTO t VALUES (?)', args: [2] }, ['INSERT INTO t VALUES (?)', [1]]], 'write')
      .catch((e) => e);
    expect(failed).toBeInstanceOf(LibsqlBatchError);
    expect(failed).toMatchObject({ statementIndex: 2, code: 'SQLITE_CONSTRAINT', extendedCode: 'SQLITE_CONSTRAINT_UNIQUE' });
    expect((await c.execute('SELECT count(*) AS n FROM t')).rows[0]!.n).toBe(0);
    const [one, count] = await c.batch(['INSERT INTO t VALUES (1)', 'SELECT count(*) AS n FROM t'], 'write');
    expect(one!.rowsAffected).toBe(1);
    expect(count!.rows[0]!.n).toBe(1);
  });

  it('runs read and deferred transactions as @libsql/client does', async () => {
    const seen = [];
    for (const open of [local, reference]) {
      const c = await open(freshUrl());
      await c.execute('CREATE TABLE t (v)');
      const read = await c.transaction('read');
      const count = (await read.execute('SELECT count(*) AS n FROM t')).rows[0]!.n;
      const write = await read.execute('INSERT INTO t VALUES (1)').then(
        (rs) => `rowsAffected ${rs.rowsAffected}`,
        (e: LibsqlError) => `${e.code} ${e.message}`,
      );
      await read.rollback();
      const deferred = await c.transaction('deferred');
      await deferred.execute('INSERT INTO t VALUES (2)');
      await deferred.commit();
      seen.push({ count, write, after: (await c.execute('SELECT v FROM t')).rows.map((r) => r.v) });
    }
    expect(seen[0]).toEqual(seen[1]);
  });

  it('rejects a second transaction on a single-connection in-memory database instead of waiting for ever', async () => {
    for (const url of [':memory:', 'file::memory:']) {
      const c = createLocalClient({ url });
      cleanups.push(() => c.close());
      await c.execute('CREATE TABLE t (v)');
      const tx = await c.transaction('write');
      await expect(c.execute('SELECT 1')).rejects.toMatchObject({ code: 'TRANSACTION_ACTIVE' });
      await tx.execute('INSERT INTO t VALUES (1)');
      await tx.commit();
      expect((await c.execute('SELECT count(*) AS n FROM t')).rows[0]!.n).toBe(1);
    }
  });
});

describe('local client - another process holding the write lock', () => {
  /** A second connection (as another process would) holding BEGIN IMMEDIATE on `url`; the returned function lets go. */
  async function holdLock(url: string): Promise<{ release(): void }> {
    const holder = createClient({ url, timeout: 5 });
    cleanups.push(() => holder.close());
    const tx = await holder.transaction('write');
    cleanups.push(() => tx.close());
    return { release: () => tx.close() };
  }

  it('fails BEGIN IMMEDIATE with an error isBusyError recognises, and the same connection then commits', async () => {
    const url = freshUrl();
    const c = await local(url, 1);
    await c.execute('CREATE TABLE t (v)');
    const holder = await holdLock(url);
    const busy = await c.transaction('write').catch((e) => e);
    expect(busy).toBeInstanceOf(LibsqlError);
    expect(busy).toMatchObject({ code: 'SQLITE_BUSY', extendedCode: 'SQLITE_BUSY', rawCode: 5 });
    expect(isBusyError(busy)).toBe(true);
    expect(isBusyError(await writeLockBusy(c))).toBe(true);
    holder.release();
    expect(await writeLockBusy(c)).toBeUndefined();
    const tx = await c.transaction('write');
    await tx.execute({ sql: 'INSERT INTO t VALUES (?)', args: [1] });
    await tx.commit();
    await c.execute({ sql: 'INSERT INTO t VALUES (?)', args: [2] });
    // committed for everyone, not merely visible on this connection
    expect((await (await reference(url)).execute('SELECT count(*) AS n FROM t')).rows[0]!.n).toBe(2);
  });

  it('fails a cached autocommit INSERT with a busy error, and the next writes through the client are committed', async () => {
    const url = freshUrl();
    const c = await local(url, 1);
    await c.execute('CREATE TABLE t (v)');
    const insert = { sql: 'INSERT INTO t VALUES (?)', args: [1] };
    await c.execute(insert);
    const holder = await holdLock(url);
    const busy = await c.execute(insert).catch((e) => e);
    expect(isBusyError(busy)).toBe(true);
    holder.release();
    await c.execute(insert);
    const tx = await c.transaction('write');
    await tx.execute(insert);
    await tx.commit();
    expect((await (await reference(url)).execute('SELECT count(*) AS n FROM t')).rows[0]!.n).toBe(3);
  });

  it('fails a write in a deferred transaction with a busy error; after rollback the client commits', async () => {
    const url = freshUrl();
    const c = await local(url, 1);
    await c.execute('CREATE TABLE t (v)');
    const holder = await holdLock(url);
    const tx = await c.transaction('deferred');
    await tx.execute('SELECT count(*) FROM t');
    expect(isBusyError(await tx.execute('INSERT INTO t VALUES (1)').catch((e) => e))).toBe(true);
    await tx.rollback();
    holder.release();
    await c.batch(['INSERT INTO t VALUES (2)'], 'write');
    expect((await (await reference(url)).execute('SELECT count(*) AS n FROM t')).rows[0]!.n).toBe(1);
  });
});

describe('local client - errors and lifecycle', () => {
  it('reports unique and primary-key violations with the codes @libsql/client gives, and the statement runs again after', async () => {
    const url = freshUrl();
    const c = await local(url);
    await c.execute('CREATE TABLE inbox (event_id TEXT, consumer TEXT, PRIMARY KEY (event_id, consumer))');
    await c.execute('CREATE TABLE keys (k TEXT UNIQUE)');
    const pk = { sql: 'INSERT INTO inbox VALUES (?, ?)', args: ['e1', 'c1'] };
    const unique = { sql: 'INSERT INTO keys VALUES (?)', args: ['k1'] };
    await c.execute(pk);
    await c.execute(unique);
    const ref = await reference(url);
    const dupPk = await outcome(c, pk);
    expect(dupPk.error).toMatchObject({ name: 'LibsqlError', code: 'SQLITE_CONSTRAINT', extendedCode: 'SQLITE_CONSTRAINT_PRIMARYKEY', rawCode: 1555 });
    expect(dupPk).toEqual(await outcome(ref, pk));
    const dupUnique = await outcome(c, unique);
    expect(dupUnique.error).toMatchObject({ code: 'SQLITE_CONSTRAINT', extendedCode: 'SQLITE_CONSTRAINT_UNIQUE', rawCode: 2067 });
    expect(dupUnique).toEqual(await outcome(ref, unique));
    expect((await c.execute({ sql: 'INSERT INTO inbox VALUES (?, ?)', args: ['e2', 'c1'] })).rowsAffected).toBe(1);
    const tx = await c.transaction('write');
    await expect(tx.execute(pk)).rejects.toMatchObject({ extendedCode: 'SQLITE_CONSTRAINT_PRIMARYKEY' });
    await tx.execute({ sql: 'INSERT INTO inbox VALUES (?, ?)', args: ['e3', 'c1'] });
    await tx.commit();
    expect((await ref.execute('SELECT count(*) AS n FROM inbox')).rows[0]!.n).toBe(3);
  });

  it('reconnect closes every connection: an open transaction ends and lets go of the write lock, connection state is gone', async () => {
    const url = freshUrl();
    const c = await local(url, 1);
    await c.execute('CREATE TEMP TABLE scratch (v)');
    const tx = await c.transaction('write');
    await tx.execute('INSERT INTO scratch VALUES (1)');
    await c.reconnect();
    expect(tx.closed).toBe(true);
    await expect(tx.execute('SELECT 1')).rejects.toMatchObject({ code: 'TRANSACTION_CLOSED' });
    const other = await reference(url);
    await (await other.transaction('write')).rollback();
    await expect(c.execute('SELECT * FROM scratch')).rejects.toMatchObject({ code: 'SQLITE_ERROR', message: expect.stringMatching(/no such table/) });
    expect(c.closed).toBe(false);
  });

  it('rejects every call with CLIENT_CLOSED once closed, and works again after reconnect', async () => {
    const c = await local(freshUrl());
    c.close();
    expect(c.closed).toBe(true);
    for (const call of [
      () => c.execute('SELECT 1'),
      () => c.batch(['SELECT 1']),
      () => c.transaction('write'),
      () => c.executeMultiple('SELECT 1'),
      () => c.migrate(['SELECT 1']),
    ]) {
      await expect(call()).rejects.toMatchObject({ code: 'CLIENT_CLOSED' });
    }
    await c.reconnect();
    expect((await c.execute('SELECT 1 AS one')).rows[0]!.one).toBe(1);
  });

  it('refuses URLs that are not local files, like @libsql/client local driver', () => {
    expect(() => createLocalClient({ url: 'http://127.0.0.1:8080' })).toThrow(expect.objectContaining({ code: 'URL_SCHEME_NOT_SUPPORTED' }));
    expect(() => createLocalClient({ url: 'file://host/x.db' })).toThrow(expect.objectContaining({ code: 'URL_INVALID' }));
  });

  it('keeps serving correct results past the statement cache bound', async () => {
    const c = await local(freshUrl(), 1);
    for (let round = 0; round < 2; round++) {
      for (let i = 0; i < 450; i++) expect((await c.execute(`SELECT ${i} AS v, ${round} AS round`)).rows[0]).toEqual({ v: i, round });
    }
  });
});
