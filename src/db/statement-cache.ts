// One local connection of the local-file client (local-client.ts): the `libsql` native binding with its prepared
// statements kept, and @libsql/client 0.18's sqlite3.js conversions (arguments, rows, errors) reproduced exactly.
import Database from 'libsql';
import { LibsqlError, type InArgs, type InStatement, type IntMode, type ResultSet, type Row, type Value } from '@libsql/core/api';
import { ResultSetImpl } from '@libsql/core/util';

/** How many prepared statements one connection keeps; past it, the least recently used one is dropped. */
export const STATEMENT_CACHE_SIZE = 200;

/** Counts schema changes made through one client's connections; cached column names are re-read when it moves. */
export type SchemaGeneration = { value: number };

/** What `new Database()` of the `libsql` binding accepts (its typings list only some of it). */
export type LocalDatabaseOptions = {
  authToken?: string | undefined;
  encryptionKey?: string | undefined;
  remoteEncryptionKey?: string | undefined;
  syncUrl?: string | undefined;
  syncPeriod?: number | undefined;
  readYourWrites?: boolean | undefined;
  offline?: boolean | undefined;
  timeout?: number | undefined;
};

type SqlArgs = unknown[] | Record<string, unknown>;
type Rows = new (values: Value[]) => Row;

type Cached = {
  stmt: Database.Statement;
  reader: boolean;
  // a `*` or `t.*` result column: its names are re-read after every run (see hasStarColumn)
  star: boolean;
  // read after a run (a cached statement may have been re-prepared against a new schema since it was prepared)
  columns: string[] | undefined;
  columnTypes: string[];
  rows: Rows | undefined;
  generation: number;
};

// DDL is run once (migrations) and changes what cached statements return: it is neither cached nor left unnoticed.
const DDL = /^\s*(?:CREATE|DROP|ALTER)\b/i;
const DDL_ANYWHERE = /\b(?:CREATE|DROP|ALTER)\b/i;

/**
 * A connection that prepares each distinct SQL text once. A statement that failed with SQLITE_BUSY or SQLITE_LOCKED
 * is the one case where SQLite leaves it running, and the binding can reset it only by running it again; while it
 * runs, COMMIT fails with "SQL statements in progress" and autocommit writes stay uncommitted. So such a failure
 * drops the statement and marks the connection `tainted`, and the pool closes it instead of reusing it.
 */
export class LocalConnection {
  readonly #db: Database.Database;
  readonly #cache = new Map<string, Cached>();
  readonly #schema: SchemaGeneration;
  #tainted = false;

  /** Opens `path` (a file path or `file::memory:…`); throws what the binding throws when it cannot. */
  constructor(path: string, options: LocalDatabaseOptions, schema: SchemaGeneration) {
    this.#db = new Database(path, options as Database.Options);
    this.#schema = schema;
  }

  /** False once closed (by this client or by a failure). */
  get open(): boolean {
    return this.#db.open;
  }

  /** Whether a transaction is open; false on a closed connection (the binding aborts the process if asked then). */
  get inTransaction(): boolean {
    return this.#db.open && this.#db.inTransaction;
  }

  /** True once a statement failed in a way that can leave it running: the connection must not be reused. */
  get tainted(): boolean {
    return this.#tainted;
  }

  /** Runs one statement as sqlite3.js's executeStmt does (same ResultSet, same errors), preparing it only once. */
  execute(stmt: InStatement, intMode: IntMode): ResultSet {
    let sql: string;
    let args: SqlArgs;
    if (typeof stmt === 'string') {
      sql = stmt;
      args = [];
    } else {
      sql = stmt.sql;
      args = argsToSql(stmt.args, intMode);
    }
    const entry = this.#statement(sql);
    let raw: Value[][];
    try {
      if (!entry.reader) {
        const info = entry.stmt.run(args);
        return new ResultSetImpl([], [], [], info.changes, BigInt(info.lastInsertRowid));
      }
      // all() runs the statement to its end before any row is converted: a conversion that throws leaves nothing running
      raw = entry.stmt.all(args) as Value[][];
    } catch (error) {
      throw this.#failed(sql, entry, error);
    }
    const first = raw[0];
    if (
      entry.star ||
      entry.columns === undefined ||
      entry.generation !== this.#schema.value ||
      (first !== undefined && first.length !== entry.columns.length)
    ) {
      readColumns(entry, this.#schema.value);
    }
    const RowOf = entry.rows!;
    const rows: Row[] = new Array(raw.length);
    for (let i = 0; i < raw.length; i++) rows[i] = new RowOf(valuesFromSql(raw[i]!, intMode));
    return new ResultSetImpl(entry.columns!, entry.columnTypes, rows, 0, undefined);
  }

  /** Runs `sql` (any number of statements) through the binding's exec, which finalizes them: nothing stays prepared. */
  executeMultiple(sql: string): void {
    // only DDL changes what cached statements return (the writer's lock probe runs through here before every group)
    if (DDL_ANYWHERE.test(sql)) this.#schema.value++;
    this.control(sql);
  }

  /**
   * Runs a transaction-control statement (BEGIN …, COMMIT, ROLLBACK, a PRAGMA) through exec: a BEGIN IMMEDIATE that
   * finds the write lock taken leaves no running statement behind, so the connection stays usable.
   */
  control(sql: string): void {
    try {
      this.#db.exec(sql);
    } catch (error) {
      throw mapSqliteError(error);
    }
  }

  /** The binding's sync (embedded replicas); it throws for a plain local file. */
  sync(): { frames_synced: number; frame_no: number } {
    return this.#db.sync() as { frames_synced: number; frame_no: number };
  }

  /**
   * Drops the statements and closes the connection, rolling back first: the binding closes the SQLite connection
   * only once every statement is garbage-collected, and an open transaction must not keep the write lock that long.
   */
  close(): void {
    this.#cache.clear();
    if (!this.#db.open) return;
    try {
      if (this.#db.inTransaction) this.#db.exec('ROLLBACK');
    } catch {
      // closing ends the transaction anyway
    }
    try {
      this.#db.close();
    } catch {
      // nothing useful to do while tearing down
    }
  }

  #statement(sql: string): Cached {
    const cache = this.#cache;
    const hit = cache.get(sql);
    if (hit !== undefined) {
      // most recently used last, so eviction takes the first key
      cache.delete(sql);
      cache.set(sql, hit);
      return hit;
    }
    let stmt: Database.Statement;
    try {
      stmt = this.#db.prepare(sql);
    } catch (error) {
      throw mapSqliteError(error);
    }
    stmt.safeIntegers(true);
    const reader = stmt.reader;
    if (reader) stmt.raw(true);
    const entry: Cached = { stmt, reader, star: reader && hasStarColumn(sql), columns: undefined, columnTypes: [], rows: undefined, generation: -1 };
    if (!reader && DDL.test(sql)) {
      this.#schema.value++;
      return entry;
    }
    cache.set(sql, entry);
    if (cache.size > STATEMENT_CACHE_SIZE) cache.delete(cache.keys().next().value!);
    return entry;
  }

  #failed(sql: string, entry: Cached, error: unknown): unknown {
    const mapped = mapSqliteError(error);
    const base = mapped instanceof LibsqlError && mapped.rawCode !== undefined ? mapped.rawCode & 0xff : 0;
    if (base === SQLITE_BUSY || base === SQLITE_LOCKED) {
      if (this.#cache.get(sql) === entry) this.#cache.delete(sql);
      this.#tainted = true;
    }
    return mapped;
  }
}

const SQLITE_BUSY = 5;
const SQLITE_LOCKED = 6;

// Keeps the row class while the names stay the same: a statement re-read after every run builds no class per run.
function readColumns(entry: Cached, generation: number): void {
  const columns = entry.stmt.columns();
  const names = columns.map((c) => c.name);
  if (entry.rows === undefined || !sameNames(names, entry.columns!)) {
    entry.columns = names;
    entry.rows = rowClass(names);
  }
  entry.columnTypes = columns.map((c) => c.type ?? '');
  entry.generation = generation;
}

function sameNames(a: string[], b: string[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

// A `*` right after SELECT, DISTINCT, ALL, RETURNING, a comma or a qualifier's dot; not count(*) nor a product.
const STAR_COLUMN = /(?:\b(?:SELECT|DISTINCT|ALL|RETURNING)|[,.])\s*\*/i;

/**
 * Whether `sql` has a `*` or `t.*` result column (anywhere, subqueries included). SQLite re-prepares a statement
 * after a schema change by any connection, so its values always follow the current schema; a star's names do too,
 * and another process can rebuild a table with as many columns in another order without this client running DDL.
 * Explicit references keep the column they name: only the letter case of a re-declared name, a rowid shown under
 * its INTEGER PRIMARY KEY alias and the declared types can drift, which is not worth a columns() read (about 1 µs
 * a column) on every run of every statement. A false positive (`1.*2`) only costs that read.
 */
function hasStarColumn(sql: string): boolean {
  return sql.includes('*') && STAR_COLUMN.test(syntaxOnly(sql));
}

// `sql` with each string literal and quoted identifier replaced by `_` and each comment by a space.
function syntaxOnly(sql: string): string {
  let out = '';
  let i = 0;
  while (i < sql.length) {
    const ch = sql[i]!;
    if (ch === "'" || ch === '"' || ch === '`' || ch === '[') {
      const close = ch === '[' ? ']' : ch;
      let end = sql.indexOf(close, i + 1);
      // a doubled quote is one quote character inside the literal or identifier; `]` has no escape
      while (end !== -1 && close !== ']' && sql[end + 1] === close) end = sql.indexOf(close, end + 2);
      out += '_';
      i = end === -1 ? sql.length : end + 1;
    } else if (ch === '-' && sql[i + 1] === '-') {
      const end = sql.indexOf('\n', i + 2);
      out += ' ';
      i = end === -1 ? sql.length : end + 1;
    } else if (ch === '/' && sql[i + 1] === '*') {
      const end = sql.indexOf('*/', i + 2);
      out += ' ';
      i = end === -1 ? sql.length : end + 2;
    } else {
      out += ch;
      i++;
    }
  }
  return out;
}

/**
 * A row class for one list of column names, with what sqlite3.js's rows have: a value per index and `length`
 * (here getters on the prototype, so not enumerable) and an enumerable own property per column name (the first of
 * duplicates), so Object.keys, JSON and drizzle's normalizeRow see the names only. sqlite3.js defines each of these
 * with Object.defineProperty on every row; a class builds the row with plain stores.
 */
function rowClass(columns: string[]): Rows {
  const width = columns.length;
  // Which names a sqlite3.js row ends up with, and which value each holds, including its corner cases (a column
  // named "length" or "0" is not set; one named "1" among two columns holds the second value).
  const probe: Record<string, number> = {};
  Object.defineProperty(probe, 'length', { value: width });
  for (let i = 0; i < width; i++) {
    Object.defineProperty(probe, i, { value: i });
    const column = columns[i]!;
    if (!Object.hasOwn(probe, column)) Object.defineProperty(probe, column, { value: i, enumerable: true, configurable: true, writable: true });
  }
  const names = Object.keys(probe);
  const at = names.map((name) => probe[name]!);
  // `__proto__` and index-like names cannot be assigned (a prototype setter, a getter-only index): define those
  const defined = names.map((name) => name === '__proto__' || isIndexBelow(name, width));
  return LocalRow.shaped(width, names, at, defined);
}

function isIndexBelow(name: string, width: number): boolean {
  const n = Number(name);
  return Number.isInteger(n) && n >= 0 && n < width && String(n) === name;
}

class LocalRow {
  readonly #values: Value[];

  constructor(values: Value[]) {
    this.#values = values;
  }

  static shaped(width: number, names: string[], at: number[], defined: boolean[]): Rows {
    const special = defined.some(Boolean);
    const Row = class extends LocalRow {
      constructor(values: Value[]) {
        super(values);
        const own = this as unknown as Record<string, Value>;
        for (let j = 0; j < names.length; j++) {
          const value = values[at[j]!]!;
          if (special && defined[j]) Object.defineProperty(own, names[j]!, { value, enumerable: true, configurable: true, writable: true });
          else own[names[j]!] = value;
        }
      }
    };
    for (let i = 0; i < width; i++) {
      Object.defineProperty(Row.prototype, i, {
        get(this: LocalRow) {
          return this.#values[i];
        },
      });
    }
    Object.defineProperty(Row.prototype, 'length', { value: width });
    return Row as unknown as Rows;
  }
}

const minSafeBigint = -9007199254740991n;
const maxSafeBigint = 9007199254740991n;
const minInteger = -9223372036854775808n;
const maxInteger = 9223372036854775807n;

/** Converts one raw row in place: integers per intMode (RangeError past 2^53 in 'number'), blobs to ArrayBuffer. */
function valuesFromSql(values: Value[], intMode: IntMode): Value[] {
  for (let i = 0; i < values.length; i++) {
    const value = values[i] as unknown;
    if (typeof value === 'bigint') values[i] = intFromSql(value, intMode);
    else if (value instanceof Uint8Array) values[i] = arrayBufferOf(value);
  }
  return values;
}

function intFromSql(value: bigint, intMode: IntMode): Value {
  if (intMode === 'number') {
    if (value < minSafeBigint || value > maxSafeBigint) throw new RangeError('Received integer which cannot be safely represented as a JavaScript number');
    return Number(value);
  }
  if (intMode === 'bigint') return value;
  if (intMode === 'string') return `${value}`;
  throw new Error('Invalid value for IntMode');
}

function arrayBufferOf(bytes: Uint8Array): ArrayBuffer {
  const buffer = bytes.buffer as ArrayBuffer;
  return bytes.byteOffset === 0 && bytes.byteLength === buffer.byteLength ? buffer : buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
}

/** sqlite3.js's argument handling: positional values converted, named ones stripped of their `@`/`$`/`:` prefix. */
function argsToSql(args: InArgs | undefined, intMode: IntMode): SqlArgs {
  if (Array.isArray(args)) {
    const out: unknown[] = new Array(args.length);
    for (let i = 0; i < args.length; i++) out[i] = valueToSql(args[i], intMode);
    return out;
  }
  const out: Record<string, unknown> = {};
  for (const name in args) {
    const argName = name[0] === '@' || name[0] === '$' || name[0] === ':' ? name.substring(1) : name;
    out[argName] = valueToSql(args[name], intMode);
  }
  return out;
}

function valueToSql(value: unknown, intMode: IntMode): unknown {
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new RangeError('Only finite numbers (not Infinity or NaN) can be passed as arguments');
    return value;
  }
  if (typeof value === 'bigint') {
    if (value < minInteger || value > maxInteger) throw new RangeError('bigint is too large to be represented as a 64-bit integer and passed as argument');
    return value;
  }
  if (typeof value === 'boolean') {
    if (intMode === 'bigint') return value ? 1n : 0n;
    if (intMode === 'string') return value ? '1' : '0';
    return value ? 1 : 0;
  }
  // a view, as sqlite3.js's Buffer.from(arrayBuffer) is: the binding accepts any Uint8Array, and node:buffer stays out
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  if (value instanceof Date) return value.valueOf();
  if (value === undefined) throw new TypeError('undefined cannot be passed as argument to the database');
  return value;
}

/** A `libsql` SqliteError as the LibsqlError sqlite3.js makes of it (code = base code name, extendedCode, rawCode). */
export function mapSqliteError(error: unknown): unknown {
  if (error instanceof Database.SqliteError) {
    const e = error as InstanceType<typeof Database.SqliteError>;
    return new LibsqlError(e.message, baseCode(e.rawCode), e.code, e.rawCode, e);
  }
  return error;
}

function baseCode(rawCode: number | undefined): string {
  if (rawCode === undefined) return 'SQLITE_UNKNOWN';
  const base = rawCode & 0xff;
  return SQLITE_ERROR_CODES[base] ?? `SQLITE_UNKNOWN_${base.toString()}`;
}

const SQLITE_ERROR_CODES: Record<number, string> = {
  1: 'SQLITE_ERROR',
  2: 'SQLITE_INTERNAL',
  3: 'SQLITE_PERM',
  4: 'SQLITE_ABORT',
  5: 'SQLITE_BUSY',
  6: 'SQLITE_LOCKED',
  7: 'SQLITE_NOMEM',
  8: 'SQLITE_READONLY',
  9: 'SQLITE_INTERRUPT',
  10: 'SQLITE_IOERR',
  11: 'SQLITE_CORRUPT',
  12: 'SQLITE_NOTFOUND',
  13: 'SQLITE_FULL',
  14: 'SQLITE_CANTOPEN',
  15: 'SQLITE_PROTOCOL',
  16: 'SQLITE_EMPTY',
  17: 'SQLITE_SCHEMA',
  18: 'SQLITE_TOOBIG',
  19: 'SQLITE_CONSTRAINT',
  20: 'SQLITE_MISMATCH',
  21: 'SQLITE_MISUSE',
  22: 'SQLITE_NOLFS',
  23: 'SQLITE_AUTH',
  24: 'SQLITE_FORMAT',
  25: 'SQLITE_RANGE',
  26: 'SQLITE_NOTADB',
  27: 'SQLITE_NOTICE',
  28: 'SQLITE_WARNING',
};
