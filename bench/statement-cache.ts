// Micro-benchmark of one statement's cost through @libsql/client 0.18 (re-prepares every execute), the local client
// (src/db/local-client.ts, prepared statements kept per connection) and a cached statement of the raw `libsql`
// binding beneath both. Prints µs per statement; no assertions.
// Usage: node --import tsx bench/statement-cache.ts [N]   (N inserts per run, default 20000)
import { createClient, type Client } from '@libsql/client';
import Database from 'libsql';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalClient } from '../src/db/local-client.ts';

const N = Number(process.argv[2] ?? 20_000);
const SELECT_ROWS = 256;
const SELECT_RUNS = 2_000;
const ROUNDS = 3;

const SCHEMA = 'CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, name TEXT NOT NULL, qty INTEGER NOT NULL, price REAL, note TEXT)';
const INSERT = 'INSERT INTO t (name, qty, price, note) VALUES (?, ?, ?, ?)';
const SELECT = 'SELECT id, name, qty, price, note FROM t ORDER BY id LIMIT ?';

const dir = mkdtempSync(join(tmpdir(), 'statement-cache-bench-'));
let files = 0;
const freshUrl = () => `file:${join(dir, `b${files++}.db`)}`;

const perStatement = (startNs: bigint, n: number) => Number(process.hrtime.bigint() - startNs) / n / 1000;

async function clientInsert(client: Client, n: number): Promise<number> {
  const tx = await client.transaction('write');
  const start = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await tx.execute({ sql: INSERT, args: [`name-${i}`, i, i * 0.5, i % 3 === 0 ? null : 'note'] });
  const us = perStatement(start, n);
  await tx.commit();
  return us;
}

async function clientSelect(client: Client, runs: number): Promise<number> {
  const start = process.hrtime.bigint();
  for (let i = 0; i < runs; i++) {
    const rs = await client.execute({ sql: SELECT, args: [SELECT_ROWS] });
    if (rs.rows.length !== SELECT_ROWS) throw new Error('short read');
  }
  return perStatement(start, runs);
}

async function benchClient(name: string, open: (url: string) => Client): Promise<{ name: string; insert: number; select: number }> {
  const client = open(freshUrl());
  await client.executeMultiple(`PRAGMA journal_mode = WAL; ${SCHEMA}`);
  await clientInsert(client, 1_000); // warm-up (JIT, cache)
  let insert = Number.POSITIVE_INFINITY;
  for (let r = 0; r < ROUNDS; r++) insert = Math.min(insert, await clientInsert(client, N));
  await clientSelect(client, 100);
  let select = Number.POSITIVE_INFINITY;
  for (let r = 0; r < ROUNDS; r++) select = Math.min(select, await clientSelect(client, SELECT_RUNS));
  client.close();
  return { name, insert, select };
}

function benchRaw(): { name: string; insert: number; select: number } {
  const db = new Database(freshUrl().slice('file:'.length), { timeout: 5 });
  db.exec(`PRAGMA journal_mode = WAL; ${SCHEMA}`);
  const insert = db.prepare(INSERT);
  const select = db.prepare(SELECT);
  select.raw(true);
  select.safeIntegers(true);
  const inserts = (n: number) => {
    db.exec('BEGIN IMMEDIATE');
    const start = process.hrtime.bigint();
    for (let i = 0; i < n; i++) insert.run([`name-${i}`, i, i * 0.5, i % 3 === 0 ? null : 'note']);
    const us = perStatement(start, n);
    db.exec('COMMIT');
    return us;
  };
  const selects = (runs: number) => {
    const start = process.hrtime.bigint();
    for (let i = 0; i < runs; i++) if (select.all([SELECT_ROWS]).length !== SELECT_ROWS) throw new Error('short read');
    return perStatement(start, runs);
  };
  inserts(1_000);
  let best = Number.POSITIVE_INFINITY;
  for (let r = 0; r < ROUNDS; r++) best = Math.min(best, inserts(N));
  selects(100);
  let bestSelect = Number.POSITIVE_INFINITY;
  for (let r = 0; r < ROUNDS; r++) bestSelect = Math.min(bestSelect, selects(SELECT_RUNS));
  db.close();
  return { name: 'libsql binding, cached statement (raw rows, no conversion)', insert: best, select: bestSelect };
}

try {
  const results = [
    await benchClient('@libsql/client 0.18 (createClient)', (url) => createClient({ url, timeout: 5 })),
    await benchClient('local client (createLocalClient)', (url) => createLocalClient({ url, timeout: 5 })),
    benchRaw(),
  ];
  console.log(`INSERT: best of ${ROUNDS} runs of ${N} in one transaction; SELECT: best of ${ROUNDS} runs of ${SELECT_RUNS} reads of ${SELECT_ROWS} rows`);
  for (const r of results) {
    console.log(`${r.name.padEnd(60)} INSERT ${r.insert.toFixed(2).padStart(7)} µs   SELECT ${SELECT_ROWS} rows ${r.select.toFixed(1).padStart(8)} µs`);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
